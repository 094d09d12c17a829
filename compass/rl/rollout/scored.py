"""One step's rollout with every sample scored as it finishes (paper §3.2.2), split by predicted length (§3.1.1).

:func:`rollout_and_score` drives a rollout backend's ``generate_samples`` stream:

- the prompts go out ordered or split by predicted work (``work``: ``n`` x predicted tokens per prompt,
  :mod:`compass.rl.sampling.length_predict`): a Ray pool splits them over its actors with its partitioner and starts
  each actor's longest first; an in-process backend is one worker, so it gets them longest first;
- each sample is handed to the scorer the moment it arrives: to the reward service's processes (a future;
  generation goes on meanwhile), or to the in-process score function (which holds the controller, but not
  the Ray actors, which keep generating); a batched scorer (``score_group``: the GenRM judge) gets each group
  once its last sample is in;
- a sample without text (a backend run with ``detokenize=False``) is decoded first by ``detok``
  (:class:`compass.rl.rollout.detokenize.DetokenizerPool`, in worker processes) or by the tokenizer in process.

What it returns says where the time went: ``reward_exposed_s`` is the reward time nothing hid (with a Ray
pool: from the last actor's finish to the last reward; in process: scoring in line plus the wait after the
last sample), ``generate_s`` the rest of the call; ``scoring_inline_s`` and ``reward_tail_s`` its parts.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Sequence

import torch

from compass.gym.score import Reward
from compass.rl.rollout.detokenize import completion_text
from compass.rl.sampling.length_balance import longest_first


@dataclass
class Scored:
    groups: list                  # [G][N] Completion
    rewards: torch.Tensor         # [G, N] float32
    reasons: list                 # [G][N] reason code or None
    failures: int                 # reward-service errors (scored 0)
    generate_s: float             # the step's rollout time less the reward time nothing hid
    scoring_inline_s: float       # scoring run in the controller between arrivals
    reward_tail_s: float          # from the last sample in to the last reward
    reward_exposed_s: float       # reward time nothing hid: past the last actor's finish (a pool), else inline + tail
    schedule: dict                # the pool's last_schedule ({} in process)


class GroupJudge:
    """A score function that judges a whole group at once (the GenRM judge, batched):
    ``score_group(prompt, texts) -> list[Reward]``; the rollout hands it each group when its last sample is in."""

    def score_group(self, prompt, texts: Sequence[str]) -> list:
        raise NotImplementedError


def scored(out) -> tuple[float, str | None]:
    """A score function's answer as (reward, reason): a Reward carries its reason, a plain float none."""
    if isinstance(out, Reward):
        return float(out.score), out.reason
    return float(out), None


def _samples(rollout, prompt_ids, n, sampling, work):
    """The backend's stream of finished-sample lists, in the prompts' own indices."""
    if rollout.splits_by_work:                            # a Ray pool splits and orders by work itself
        yield from rollout.generate_samples(prompt_ids, n, sampling, work)
        return
    order = longest_first(range(len(prompt_ids)), work) if work is not None else list(range(len(prompt_ids)))
    if sampling is not None and order != sorted(order):      # each prompt keeps its budget and random stream
        streams = sampling.streams or tuple(i * n for i in range(len(prompt_ids)))
        sampling = dataclasses.replace(sampling, streams=tuple(streams[i] for i in order), budgets=None
                                       if sampling.budgets is None else tuple(sampling.budgets[i] for i in order))
    for done in rollout.generate_samples([prompt_ids[i] for i in order], n, sampling):
        yield [(order[i], s, c) for i, s, c in done]


def rollout_and_score(rollout, prompts: Sequence, prompt_ids: Sequence[Sequence[int]], n: int, sampling,
                      score_fn, service, *, tok=None, work: Sequence[float] | None = None,
                      detok=None, overlap: bool = True) -> Scored:
    """Generate ``n`` samples of each prompt and score each as it finishes (``overlap`` False: after the last
    one); see the module docstring."""
    G = len(prompts)
    groups = [[None] * n for _ in range(G)]
    pending: list = [[None] * n for _ in range(G)]
    left = [n] * G
    inline = 0.0
    batched = service is None and isinstance(score_fn, GroupJudge)
    t0 = time.perf_counter()
    stream = _samples(rollout, prompt_ids, n, sampling, work)
    if not overlap:                                        # the whole batch first, then one pass of scoring
        stream = [[x for done in stream for x in done]]
    for done in stream:
        if any(c.text is None for _, _, c in done):
            texts = (detok.decode_many([c.ids for _, _, c in done]) if detok is not None
                     else [completion_text(tok, c.ids) for _, _, c in done])
            for (_, _, c), text in zip(done, texts):
                c.text = text
        ts = time.perf_counter()
        for i, s, c in done:
            p = prompts[i]
            groups[i][s] = c
            left[i] -= 1
            if service is not None:
                pending[i][s] = service.submit_spec(p.verifier, c.text, p.reference)
            elif not batched:
                pending[i][s] = scored(score_fn(p.verifier, c.text, p.reference))
            elif left[i] == 0:                             # a group judge needs the whole group
                pending[i] = [scored(r) for r in score_fn.score_group(p, [x.text for x in groups[i]])]
        inline += time.perf_counter() - ts
    t_last = time.perf_counter()
    failures = 0
    if service is not None:
        results = [[f.result() for f in row] for row in pending]
        failures = sum(r.kind != "ok" for row in results for r in row)
        pending = [[(r.score, r.reason) for r in row] for row in results]
    t_end = time.perf_counter()
    tail = t_end - t_last
    schedule = dict(rollout.last_schedule or {}) if rollout.splits_by_work else {}
    # a pool's actors kept generating while the controller scored: only what ran past their finish was exposed
    exposed = max(0.0, (t_end - t0) - schedule["makespan_s"]) if schedule else inline + tail
    rewards = torch.tensor([[v for v, _ in row] for row in pending], dtype=torch.float32).reshape(G, n)
    return Scored(groups, rewards, [[why for _, why in row] for row in pending], failures,
                  generate_s=(t_end - t0) - exposed, scoring_inline_s=inline, reward_tail_s=tail,
                  reward_exposed_s=exposed, schedule=schedule)
