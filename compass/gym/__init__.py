"""Compass-Gym: verifiable rewards (docs/gym.md, docs/architecture.md §4).

- ``registry``: the one registry, a verifier per module of ``verifiers/`` (``math_exact``, ``math``,
  ``code``, ``ifeval``, ``tool_call``, ``mcq``, ``json_schema``, ``qa``, ``title_rules``, ``genrm``),
  each with a spec form and a row form;
- ``score.score(spec, response, reference)``: the spec form, for verifier specs in tables;
- ``rows.score_row(name, row)``: the row form, for ``compass gym score``;
- helpers: ``math_answers`` (math equivalence), ``instructions`` (IFEval rules), ``sandbox`` (code),
  ``mcq_choice`` (multiple-choice reading), ``genrm_judge`` and ``genrm_verdict`` (the learned judge);
- ``penalties``: overlong, repetition and pass-rate shaping;
- ``service``: the reward service the RL engine streams samples to.
"""
from compass.gym.score import final_answer, score

__all__ = ["final_answer", "score"]
