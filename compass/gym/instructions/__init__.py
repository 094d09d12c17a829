"""Instruction checks for the ``ifeval`` verifier: IFEval's 25 (``ifeval``) and the ``compass:*`` ones
(``extra``), declared with ``kit`` and counted with ``text``."""
