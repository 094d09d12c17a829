"""GenRM-judged rewards for RL (paper §2.5.3): open-ended prompts are scored by a learned judge.

A prompt whose verifier is one of ``judged_types`` (the world's ``title_rules``: product-title rewriting)
gets its group judged by a GenRM checkpoint against the prompt's reference, through the gym's judge
adapter (``compass.gym.genrm_judge``): the policy's answer is Response A, the reference Response B;
A or TIE → 1, B → 0, no well-formed verdict → 0 (reason ``genrm_malformed``: the judge's fault, so the
reward audit does not blame the answer). Every other prompt is scored by its gym verifier as usual.

The rules verifier of a judged prompt is still run, to audit the judge: per judged sample whether the
two agree (rules score above the pass threshold vs the judge's 1) and whether the judge's GRPO advantage
points the wrong way for the rules' verdict (``compass.rl.algos.advantage_flips``, the paper's §2.4.3 flips):
the samples the judge teaches the opposite of what the rules would. ``counters()`` holds the counts.

The engine calls ``score_group(prompt, texts)`` for a whole group (the judge is batched); ``__call__``
keeps the plain ``ScoreFn`` signature for everything else.
"""
from __future__ import annotations

from typing import Callable, Sequence

from compass.gym.genrm_judge import GenRMJudge
from compass.gym.score import Reward, judge as rules_judge
from compass.rl.algos.advantage_flips import advantage_flips
from compass.rl.rollout.scored import GroupJudge
from compass.rl.sampling.prompt_data import RLPrompt, verifier_type

DEFAULT_JUDGED = ("title_rules",)


class GenRMReward(GroupJudge):
    def __init__(self, judge: GenRMJudge, *, judged_types: Sequence[str] = DEFAULT_JUDGED,
                 pass_threshold: float = 0.5, rules: Callable[[str, str, str], Reward] = rules_judge):
        self.judge, self.judged_types, self.pass_threshold, self.rules = judge, set(judged_types), pass_threshold, rules
        self.samples = self.agree = self.flips = self.groups = 0

    def __call__(self, verifier: str, response: str, reference: str) -> Reward:
        return self.rules(verifier, response, reference)

    def judges(self, prompt: RLPrompt) -> bool:
        return verifier_type(prompt.verifier) in self.judged_types

    def score_group(self, prompt: RLPrompt, texts: Sequence[str]) -> list[Reward]:
        """Rewards of one group: the judge's for a judged prompt, else the gym verifier's."""
        if not self.judges(prompt):
            return [self.rules(prompt.verifier, t, prompt.reference) for t in texts]
        verdicts = self.judge.judge([prompt.prompt] * len(texts), list(texts), [prompt.reference] * len(texts))
        rules = [float(self.rules(prompt.verifier, t, prompt.reference).score) for t in texts]
        judged = [j.reward for j in verdicts]
        self.groups += 1
        self.samples += len(texts)
        self.agree += sum((r > self.pass_threshold) == (j > self.pass_threshold) for r, j in zip(rules, judged))
        self.flips += advantage_flips(judged, rules)
        return [Reward(j.reward, "genrm_malformed" if j.malformed else (None if j.reward else "genrm_worse"))
                for j in verdicts]

    def counters(self) -> dict:
        """What the judge did over the run: samples and groups judged, malformed verdicts, agreement with the
        rules verifier, advantage sign flips against it."""
        c = self.judge.counters()
        n = self.samples
        return {"genrm_judged_samples": n, "genrm_judged_groups": self.groups, "genrm_malformed": c["malformed"],
                "genrm_malformed_rate": c["malformed"] / n if n else None,
                "genrm_inconsistent": c["inconsistent"],
                "genrm_rules_agreement": self.agree / n if n else None,
                "genrm_advantage_flips": self.flips, "genrm_advantage_flip_rate": self.flips / n if n else None}
