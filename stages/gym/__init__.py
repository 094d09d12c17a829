"""Compass-Gym: verifiable rewards (ARCHITECTURE §4).

``provisional`` holds the minimal verifiers the embedded world needs
(``math_exact``, ``mcq``); the full gym (code sandbox, IFEval, tool use,
JSON extraction, GenRM judge, streaming service) grows beside it.
"""
from stages.gym.provisional import final_answer, score

__all__ = ["final_answer", "score"]
