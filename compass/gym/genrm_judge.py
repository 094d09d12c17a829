"""The GenRM judge adapter (paper §2.5.2-§2.5.3): reward 1 when the policy's answer is at least as good as the reference.

The judge is a GenRM checkpoint asked through the rollout engine: the policy's
response is Response A, the reference Response B, in the GenRM stage's own
prompt (``compass.gym.genrm_verdict.judge_prompt``). The last
``<answer>A|B|TIE</answer>`` of the judge's text is the verdict:

    A (policy better) or TIE → reward 1;  B (reference better) → 0;
    no well-formed verdict    → reward 0, counted as ``malformed``
    (so is a pair too long for the judge's context, which is not generated).

With ``swap_check`` the judge is asked a second time with the positions
swapped; the reward is 1 only when both orders say better-or-equal, and
pairs whose two verdicts disagree are counted as ``inconsistent`` (GenRM's
position bias, measured rather than assumed away).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from compass.gym.genrm_verdict import SWAP, judge_prompt, parse_verdict

Generate = Callable[[list[str]], list[str]]      # judge prompts -> generated texts, same order


@dataclass(frozen=True)
class Judgement:
    verdict: str | None            # A | B | TIE from the policy's side (A = policy better); None = malformed
    reward: float
    malformed: bool
    consistent: bool | None = None  # with swap_check: both orders agreed
    second: str | None = None       # with swap_check: the swapped order's verdict, from the policy's side


def reward_for(verdict: str | None) -> float:
    """1 if the policy's answer (A) is better than or equal to the reference (B), else 0."""
    return 1.0 if verdict in ("A", "TIE") else 0.0


_POINTS = {"A": 1, "TIE": 0, "B": -1}


def outcome(j: Judgement) -> str | None:
    """The policy's answer against the reference: ``win`` / ``tie`` / ``loss``; None when a verdict is malformed.
    With both orders asked, the two verdicts are added (A +1, TIE 0, B -1): two that disagree (A then B, the
    judge's position bias) are a tie, A and TIE a win."""
    if j.malformed or j.verdict is None:
        return None
    total = _POINTS[j.verdict] + (_POINTS[j.second] if j.second is not None else _POINTS[j.verdict])
    return "win" if total > 0 else "loss" if total < 0 else "tie"


class GenRMJudge:
    """Batch judge: ``judge(prompts, responses, references) -> list[Judgement]``; counts malformed verdicts."""

    def __init__(self, generate: Generate, *, swap_check: bool = False):
        self.generate = generate
        self.swap_check = swap_check
        self.asked = self.malformed = self.inconsistent = 0

    @classmethod
    def from_checkpoint(cls, path: str, *, max_new_tokens: int = 256, batch_size: int = 16,
                        swap_check: bool = False, device: str = "auto") -> "GenRMJudge":
        """A judge backed by a local GenRM checkpoint on the ``hf`` rollout backend (greedy), on ``device`` (auto:
        the GPU when there is one, in bf16; the CPU in fp32: :func:`compass.lm.device.place_for_inference`)."""
        from compass.lm.chat import chat_prefix, sample
        from compass.lm.device import place_for_inference
        from compass.lm.model_factory import load_checkpoint
        model, tok = load_checkpoint(path)
        place_for_inference(model, device)
        context = getattr(model.config, "max_position_embeddings", None)

        def fits(prompt: str) -> bool:
            n = len(tok(chat_prefix(tok, prompt), add_special_tokens=False)["input_ids"])
            return context is None or n + max_new_tokens <= context

        def generate(prompts: list[str]) -> list[str]:
            # a pair too long for the judge's context gets no verdict (scored 0, counted as malformed)
            texts = [""] * len(prompts)
            todo = [i for i, p in enumerate(prompts) if fits(p)]
            for k in range(0, len(todo), batch_size):
                chunk = todo[k:k + batch_size]
                outs = sample(model, tok, [prompts[i] for i in chunk], n=1, max_new_tokens=max_new_tokens,
                              temperature=0.0)
                for i, o in zip(chunk, outs):
                    texts[i] = o[0]["text"]
            return texts
        return cls(generate, swap_check=swap_check)

    def judge(self, prompts: Sequence[str], responses: Sequence[str], references: Sequence[str]) -> list[Judgement]:
        if not len(prompts) == len(responses) == len(references):
            raise ValueError(f"prompts, responses and references differ in length: "
                             f"{len(prompts)}, {len(responses)}, {len(references)}")
        asks = [judge_prompt(p, r, ref) for p, r, ref in zip(prompts, responses, references)]
        if self.swap_check:
            asks += [judge_prompt(p, ref, r) for p, r, ref in zip(prompts, responses, references)]
        verdicts = [parse_verdict(t or "") for t in self.generate(asks)]
        if len(verdicts) != len(asks):
            raise RuntimeError(f"judge returned {len(verdicts)} texts for {len(asks)} prompts")
        n = len(prompts)
        out = []
        for i in range(n):
            first = verdicts[i]
            if not self.swap_check:
                out.append(Judgement(first, reward_for(first), first is None))
                continue
            second = verdicts[n + i]
            second = SWAP[second] if second is not None else None     # back to the policy's side
            malformed = first is None or second is None
            consistent = None if malformed else reward_for(first) == reward_for(second)
            reward = 1.0 if not malformed and reward_for(first) and reward_for(second) else 0.0
            self.inconsistent += consistent is False
            out.append(Judgement(first, reward, malformed, consistent, second))
        self.asked += n
        self.malformed += sum(j.malformed for j in out)
        return out

    def counters(self) -> dict:
        return {"asked": self.asked, "malformed": self.malformed, "inconsistent": self.inconsistent,
                "malformed_rate": self.malformed / self.asked if self.asked else None}
