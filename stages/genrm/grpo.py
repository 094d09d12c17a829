"""GRPO on preference pairs with the RL engine: the judge is rewarded for the right ternary verdict.

Objective (paper §2.5.2, after RM-R1): max E_{(x, y_a, y_b, l) ~ D, l^ ~ r_θ} [ 1[l^ = l] ],
so the reward of a sampled judgement is 1 when its verdict equals the label, else 0. With
``format_reward`` w > 0 it becomes ``(1 - w) 1[l^ = l] + w 1[format ok]`` (a structure
check of ``<type><rubric><eval><answer>``), off by default: the warm start already teaches
the format, and a format term rewards well-formed wrong verdicts.
Each training pair is a prompt in both orders (A/B swapped, label swapped).
"""
from __future__ import annotations

import json
import os
import signal

from stages.genrm.pairs import pair_id, swapped
from compass.gym.genrm_verdict import judge_prompt, parse_judgement
from compass.rl.sampling.prompt_data import RLPrompt

VERIFIER = json.dumps({"type": "genrm_verdict"})
FAULT_ENV = "COMPASS_GENRM_KILL_AT_STEP"      # test hook: SIGKILL this process after that GRPO step


def verdict_reward(format_weight: float = 0.0):
    """``score_fn(spec, judgement_text, label) -> reward`` for the RL engine."""
    def score(spec: str, response: str, reference: str) -> float:
        j = parse_judgement(response)
        right = float(j.verdict is not None and j.verdict == reference)
        return (1.0 - format_weight) * right + format_weight * float(j.format_ok)
    return score


def judge_prompts(rows: list[dict]) -> list[RLPrompt]:
    """Each pair in both orders; the reference is the label of that order."""
    out = []
    for r in rows:
        for suffix, x in (("", r), (":swap", swapped(r))):
            out.append(RLPrompt(id=f"{pair_id(r)}{suffix}",
                                prompt=judge_prompt(x["prompt"], x["response_a"], x["response_b"]),
                                reference=x["label"], verifier=VERIFIER, domain=r.get("domain") or "",
                                task=r.get("task") or ""))
    return out


def _fault_hook():
    at = os.environ.get(FAULT_ENV)
    if not at:
        return None

    def on_step(step, row, model):
        if step == int(at):
            os.kill(os.getpid(), signal.SIGKILL)
    return on_step


def run_grpo(model, tok, rows: list[dict], config, state_dir, out_dir, log):
    """GRPO steps on ``model`` in place (resuming from ``state_dir``); returns the engine's RLResult."""
    from compass.rl.engine import train
    return train(model, tok, judge_prompts(rows), config.grpo, score_fn=verdict_reward(config.format_reward),
                 log=log, desc="genrm grpo", out_dir=out_dir, state_dir=state_dir, on_step=_fault_hook())
