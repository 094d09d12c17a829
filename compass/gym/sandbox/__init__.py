"""The code sandbox of the ``code`` verifier: a pool of warm workers (``pool``) started by ``launch``,
each running ``worker.py`` as a script, which forks one locked-down ``child`` per task."""
