"""A reward-service worker killed (SIGKILL of its process) while an RL step is being scored: the service replaces
the worker and scores the task it held again, so the run completes with every sample rewarded exactly once and
no reward failure.

The verifier is the real ``code`` sandbox on a program built from each response: it sleeps 0.2 s (so the kill
lands while the worker is scoring) and then checks the response's length, so each reward can be checked against
its own row."""
from __future__ import annotations

import collections
import json
import os
import signal
import time

import pytest

from compass.gym import service as service_module
from compass.lm.model_factory import ModelConfig, build_model, build_tokenizer
from compass.rl.config import RLConfig
from compass.rl.sampling.prompt_data import RLPrompt
from compass.rl.engine import train

pytestmark = pytest.mark.slow

SLOW_S = 0.5
SPEC = json.dumps({"type": "code", "tests": ["assert len(response) % 3 == 0"], "timeout_s": 10})
TEXTS = ["1+1=?", "What is 12 times 7?", "Sort 3, 1, 2.", "hi", "Name a prime number."]
STEPS, PROMPTS, GROUP = 3, 4, 2
KILL_STEP = 1


def _program(response: str) -> str:
    # hex: the response may hold <think> or fences, which would change what the code verifier runs
    return f"import time\ntime.sleep({SLOW_S})\nresponse = bytes.fromhex({response.encode().hex()!r}).decode()\n"


def test_reward_worker_killed_while_a_step_is_scored(monkeypatch):
    monkeypatch.setenv("COMPASS_PROGRESS", "0")
    made, killed = [], []

    class Service(service_module.RewardService):
        """The engine's reward service, recorded; its ``submit_spec`` scores the slow program of each response
        and, at the second submission of step ``KILL_STEP``, SIGKILLs worker 0 while both workers score."""

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.submitted = 0
            self.replaced: list[tuple[str, int]] = []
            made.append(self)

        def _replace(self, worker, *, why):    # seen here: why the worker went and how many tasks it held
            self.replaced.append((why, len(worker.inflight)))
            super()._replace(worker, why=why)

        def submit_spec(self, spec, response, reference, token_ids=None):
            fut = super().submit_spec(spec, _program(response), reference, token_ids)
            self.submitted += 1
            if self.submitted == KILL_STEP * PROMPTS * GROUP + 2:   # the step's first two tasks: one a worker
                deadline = time.monotonic() + 10
                while not fut.running() and time.monotonic() < deadline:     # handed to its worker
                    time.sleep(0.005)
                # worker 0 holds a task (polled, not slept for: a loaded machine may be slower than any guess)
                while not self._workers[0].inflight and time.monotonic() < deadline:
                    time.sleep(0.005)
                pid = self.worker_pids()[0]
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            return fut

    monkeypatch.setattr(service_module, "RewardService", Service)
    tok = build_tokenizer("")
    prompts = [RLPrompt(f"p{i}", t, "x", SPEC, "code", "a") for i, t in enumerate(TEXTS)]
    cfg = RLConfig(steps=STEPS, checkpoint_every=0, sampling={"prompts_per_step": PROMPTS, "group_size": GROUP},
                   rollout={"max_new_tokens": 8}, reward={"workers": 2})
    res = train(build_model(ModelConfig(), tok, seed=2), tok, prompts, cfg)

    (svc,) = made
    assert len(killed) == 1 and killed[0] not in svc.worker_pids()      # the dead worker was replaced
    assert len(svc.replaced) == 1 and svc.replaced[0][0] == "worker died" and svc.replaced[0][1] >= 1, svc.replaced
    # every sample scored exactly once, by its own program: no row missing, duplicated or crossed
    assert len(res.rollouts) == STEPS * PROMPTS * GROUP
    assert collections.Counter(r["step"] for r in res.rollouts) == {s: PROMPTS * GROUP for s in range(STEPS)}
    assert len({(r["step"], r["prompt_id"], r["sample_idx"]) for r in res.rollouts}) == len(res.rollouts)
    assert [r["reward"] for r in res.rollouts] == [float(len(r["response"]) % 3 == 0) for r in res.rollouts]
    assert [m["reward_failures"] for m in res.metrics] == [0] * STEPS         # the killed task was retried
    m = svc.metrics()["verifiers"]["spec"]
    assert m["requests"] == STEPS * PROMPTS * GROUP and m["ok"] == m["requests"] and m["failures"] == {}
