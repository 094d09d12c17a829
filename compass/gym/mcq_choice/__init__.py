"""Which option a multiple-choice answer names (``extract``), from multilingual cues (``keywords``)."""
