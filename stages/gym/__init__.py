"""Compass-Gym: verifiable rewards (ARCHITECTURE §4, docs/gym.md).

- ``rows``: the row contract of ``compass gym score`` (``score_row(name, row)``), one module per
  verifier: ``math_equiv``, ``sandbox`` (code), ``ifeval``, ``tool_reward``, ``mcq``, ``json_schema``;
- ``provisional.score(spec, response, reference)``: the world's verifier specs (``registry``);
- ``genrm_judge``: a GenRM checkpoint as a better-or-equal judge;
- ``penalties``: overlong, repetition and pass-rate shaping;
- ``service``: the reward service the RL engine streams samples to.
"""
from stages.gym.provisional import final_answer, score

__all__ = ["final_answer", "score"]
