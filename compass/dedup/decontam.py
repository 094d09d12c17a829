"""Decontamination: does a training text share a token n-gram with an evaluation prompt?

Built from the eval side only, so candidates are checked in one streaming pass:

- an eval prompt of at least ``n`` tokens contributes its n-grams;
- a shorter one (but at least ``min_tokens``) is matched whole, as a contiguous token run;
- *template text* of the eval side is no evidence: an n-gram that at least
  ``template_share`` of a suite's prompts (and at least two of them) contain, or more
  than ``max_hits`` eval prompts in all, marks its tokens as template; an n-gram counts
  only if at least half of its tokens are not template tokens of that prompt. So the
  instructions and answer formats shared by a suite's items, and the n-grams that run
  from them into an item's first words, do not flag every training row written in the
  same format. A suite is the eval rows' ``domain/task``.
"""
from __future__ import annotations

from collections import Counter, defaultdict

Gram = tuple[str, ...]


def _evidence(toks: list[str], n: int, template: set[Gram]) -> list[Gram]:
    """The n-grams of an eval prompt at least half of whose tokens are not template tokens."""
    starts = range(len(toks) - n + 1)
    covered = [False] * len(toks)                 # tokens inside some template n-gram of this prompt
    for k in starts:
        if tuple(toks[k:k + n]) in template:
            covered[k:k + n] = [True] * n
    content = [0]                                 # prefix sums of non-template tokens
    for c in covered:
        content.append(content[-1] + (not c))
    return [tuple(toks[k:k + n]) for k in starts if content[k + n] - content[k] >= (n + 1) // 2]


class Decontaminator:
    def __init__(self, eval_tokens: list[list[str]], n: int = 13, max_hits: int = 10,
                 template_share: float = 0.2, min_tokens: int = 5, suites: list[str] | None = None,
                 ids: list[str] | None = None):
        self.n, self.ids = n, ids
        suites = suites or ["all"] * len(eval_tokens)
        suite_size = Counter(suites)
        per_suite: dict[Gram, Counter] = defaultdict(Counter)
        long_prompts: list[int] = []
        self.short: dict[Gram, int] = {}                 # short eval prompt -> its index
        self.short_starts: dict[str, set[int]] = defaultdict(set)   # first token -> lengths
        self.too_short = 0
        for i, (toks, suite) in enumerate(zip(eval_tokens, suites)):
            if len(toks) < min_tokens:
                self.too_short += 1                      # "Hi", "2 + 2": too generic to be evidence
            elif len(toks) < n:
                self.short.setdefault(tuple(toks), i)
                self.short_starts[toks[0]].add(len(toks))
            else:
                long_prompts.append(i)
                for g in {tuple(toks[k:k + n]) for k in range(len(toks) - n + 1)}:
                    per_suite[g][suite] += 1
        self.template = {g for g, c in per_suite.items()
                         if sum(c.values()) > max_hits
                         or any(k >= 2 and k >= template_share * suite_size[s] for s, k in c.items())}
        del per_suite
        self.grams: dict[Gram, int] = {}           # evidence n-gram -> the first eval prompt that has it
        for i in long_prompts:
            for g in _evidence(eval_tokens[i], n, self.template):
                self.grams.setdefault(g, i)
        self.eval_prompts = len(eval_tokens)

    def hit(self, toks: list[str]) -> tuple[int, Gram] | None:
        """(eval prompt index, the shared n-gram or short prompt) of the first leak found, or None."""
        n, grams = self.n, self.grams
        if grams and len(toks) >= n:
            for k in range(len(toks) - n + 1):
                g = tuple(toks[k:k + n])
                if g in grams:
                    return grams[g], g
        if self.short:
            starts, short = self.short_starts, self.short
            for k, t in enumerate(toks):
                lengths = starts.get(t)
                if lengths:
                    for length in lengths:
                        g = tuple(toks[k:k + length])
                        if g in short:
                            return short[g], g
        return None

    def name(self, index: int) -> str:
        """How quarantine details name an eval prompt: its id, else its index."""
        return repr(self.ids[index]) if self.ids else f"#{index}"

    def stats(self) -> dict:
        return {"eval_prompts": self.eval_prompts, "ngrams": len(self.grams), "short_prompts": len(self.short),
                "template_ngrams": len(self.template), "too_short_prompts": self.too_short}
