"""Math answer equivalence for the ``math`` verifier: extract the final answer (``extract``), parse
LaTeX into small trees (``parse``), decide equality (``compare``, with ``sympy_worker`` as a killable
fallback); ``equal`` puts them together."""
