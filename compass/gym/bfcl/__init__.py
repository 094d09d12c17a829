"""BFCL (Berkeley Function-Calling Leaderboard) categories that run calls, for the ``bfcl_exec`` and
``bfcl_multi_turn`` verifiers: read call strings (``calls``), match results as BFCL's executable checker
does (``exec_match``), carry state across turns and compare it (``turns``), and run both in the code
sandbox against the category's reference functions (``harness``). ``exec_match`` and ``turns`` are
plain modules with no imports outside the standard library: the harness sends their source into the
sandbox, so the rules tested here are the rules that run there."""
