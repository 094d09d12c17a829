"""Screening one input table, batch by batch: every row is kept or gets exactly one reason.

Order of the checks (a row gets the first reason it earns):

1. malformed fields, any column: ``invalid_text``, ``too_long``;
2. the row itself: sft ``empty_prompt``, ``empty_response``, ``unclosed_think``,
   ``stray_think_close``, ``empty_answer``, ``bad_verifier``, ``wrong_answer``;
   prompts ``empty_prompt``, ``missing_reference``, ``bad_verifier``;
3. ``harmful`` (the configured filter, on the prompt then the response);
4. ``duplicate``: the same normalized text as an earlier row (named in the detail);
5. ``near_duplicate``: MinHash-estimated Jaccard >= the threshold with an earlier *kept* row
   that has the same reference answer (or, like it, none);
6. ``contaminated``: shares an n-gram with an eval prompt (named in the detail).

Duplicates are judged against every earlier row that passed 1-3, so a copy of a
contaminated row is a ``duplicate``; near-duplicates only against kept rows, so the
kept set has no pair above the threshold.
"""
from __future__ import annotations

import time
from collections import Counter, defaultdict

import numpy as np
import pyarrow as pa

from stages.data_filter import quality
from stages.data_filter.config import DataFilterConfig
from compass.dedup.decontam import Decontaminator
from compass.dedup.near_dup import ExactIndex, NearDupIndex, shingles, signatures
from stages.data_filter.harm import HarmFilter
from stages.data_filter.quality import Rejection
from compass.dedup.text import key_of, normalize, tokens_of

TEXT_FIELDS = {"sft": ("prompt", "response"), "prompts": ("prompt",)}
SHINGLES_PER_CHUNK = 1_000_000   # MinHash shingles held at once (about 60 MiB), however long the rows
Refs = dict[int, tuple[str, str]]   # normalized-prompt key -> (reference, verifier), from the prompts table


class Screen:
    """The state of one source's pass: duplicate indexes, counts, timings."""

    def __init__(self, cfg: DataFilterConfig, slot: str, decon: Decontaminator, harm: HarmFilter,
                 refs: Refs | None = None, rows_hint: int = 1024):
        self.cfg, self.slot, self.decon, self.harm = cfg, slot, decon, harm
        self.fields = TEXT_FIELDS[slot]
        self.refs: Refs = refs if refs is not None else {}
        self.collect_refs = slot == "prompts"
        self.exact = ExactIndex()
        self.near = (NearDupIndex(cfg.near_dup_threshold, cfg.minhash_num_perm, cfg.minhash_bands,
                                  capacity=rows_hint) if cfg.near_dedup else None)
        self.rows_in = 0
        self.schema: pa.Schema | None = None      # of the batches seen
        self.reasons: Counter = Counter()
        self.eval_hits: Counter = Counter()       # eval prompt index -> rows that leaked it
        self.seconds: dict[str, float] = defaultdict(float)

    def _tick(self, phase: str, t0: float) -> float:
        t = time.perf_counter()
        self.seconds[phase] += t - t0
        return t

    def batch(self, batch: pa.RecordBatch) -> tuple[list[Rejection | None], dict[str, list]]:
        """Each row's rejection (None = kept), and the batch's columns as Python values."""
        t = time.perf_counter()
        start = self.rows_in
        self.rows_in += batch.num_rows
        self.schema = batch.schema
        cols, why = quality.scan_batch(batch, self.cfg.max_field_chars)
        t = self._tick("scan", t)
        norm, answer_of = self._row_checks(cols, why)
        t = self._tick("quality", t)
        self._harm(norm, why)
        self._tick("harm", t)
        alive = [i for i, w in enumerate(why) if w is None]
        keys, leaks, sig_of = self._features(alive, norm, answer_of)
        t = time.perf_counter()
        self._decide(start, alive, keys, leaks, sig_of, why)
        self._tick("lsh", t)
        self.reasons.update(w[1] for w in why if w is not None)
        return why, cols

    def _row_checks(self, cols: dict[str, list], why: list) -> tuple[dict[str, list[str]], list[str | None]]:
        """Checks of each row on its own (fills ``why``); the normalized text fields, and the
        reference answer each row is judged by."""
        n, cfg = len(why), self.cfg
        absent = [None] * n
        prompts, references, verifiers = cols["prompt"], cols.get("reference", absent), cols.get("verifier", absent)
        norm_prompts = [normalize(p) if w is None else "" for p, w in zip(prompts, why)]
        if self.collect_refs:
            for i in range(n):
                if why[i] is None and references[i] and verifiers[i]:
                    self.refs.setdefault(key_of(norm_prompts[i]), (references[i], verifiers[i]))
        answer_of = list(references)
        for i in range(n):
            if why[i] is not None:
                continue
            if self.slot == "sft":
                ref, ver = references[i], verifiers[i]
                if not ref:
                    ref, ver = self.refs.get(key_of(norm_prompts[i]), (ref, ver))
                answer_of[i] = ref
                why[i] = quality.sft_reason(prompts[i], cols["response"][i], ref, ver, cfg.check_answers)
            else:
                why[i] = quality.prompt_reason(prompts[i], references[i], verifiers[i], cfg.require_reference)
        norm = {"prompt": norm_prompts}
        if "response" in self.fields:
            norm["response"] = [normalize(r) if w is None else "" for r, w in zip(cols["response"], why)]
        return norm, answer_of

    def _harm(self, norm: dict[str, list[str]], why: list) -> None:
        for field in self.fields:
            alive = [i for i, w in enumerate(why) if w is None]
            for i, hit in zip(alive, self.harm([norm[field][i] for i in alive])):
                if hit is not None:
                    why[i] = (field, "harmful", hit.detail())

    def _features(self, alive: list[int], norm: dict[str, list[str]], answer_of: list[str | None]):
        """Per row: the exact-duplicate key, the eval leak found, and (for the near-duplicate index)
        its signature's position. Row by row, so that only one row's tokens and a bounded chunk of
        shingles are held: Long-CoT traces run to thousands of tokens."""
        cfg = self.cfg
        keys: dict[int, int] = {}
        leaks: dict[int, tuple[str, int, tuple[str, ...]]] = {}   # row -> field, eval prompt, shared n-gram
        sig_of: dict[int, int] = {}
        docs: list[list[bytes]] = []
        groups: list[int] = []
        chunks: list[np.ndarray] = []
        held = 0
        for i in alive:
            t = time.perf_counter()
            ftoks = [tokens_of(norm[f][i]) for f in self.fields]
            keys[i] = key_of(*(norm[f][i] for f in self.fields))
            t = self._tick("tokens", t)
            for field, tk in zip(self.fields, ftoks):
                hit = self.decon.hit(tk)
                if hit is not None:
                    leaks[i] = (field, *hit)
                    break
            t = self._tick("decontam", t)
            if self.near is None:
                continue
            all_toks = [tok for tk in ftoks for tok in tk]
            if len(all_toks) >= cfg.near_dup_min_tokens:
                sig_of[i] = len(groups)
                docs.append(shingles(all_toks, cfg.shingle_size))
                held += len(docs[-1])
                # items with different reference answers are distinct, however alike their text
                groups.append(key_of(normalize(answer_of[i])) if answer_of[i] else 0)
                if held >= SHINGLES_PER_CHUNK:
                    chunks.append(signatures(docs, cfg.minhash_num_perm))
                    docs, held = [], 0
            self._tick("minhash", t)
        if self.near is not None:
            t = time.perf_counter()
            chunks.append(signatures(docs, cfg.minhash_num_perm))
            t = self._tick("minhash", t)
            self.near.prepare(np.concatenate(chunks), np.array(groups, np.uint64))
            self._tick("lsh", t)
        return keys, leaks, sig_of

    def _decide(self, start: int, alive: list[int], keys: dict, leaks: dict, sig_of: dict, why: list) -> None:
        """In row order, since what was kept before decides what is a copy."""
        for i in alive:
            row = start + i
            earlier = self.exact.seen(keys[i], row)
            if earlier is not None:
                why[i] = (None, "duplicate", f"same normalized text as row {earlier}")
                continue
            j = sig_of.get(i)
            m = self.near.match(j) if j is not None else None
            if m is not None:
                why[i] = (None, "near_duplicate", f"estimated Jaccard {m[1]:.2f} with row {m[0]}")
            elif i in leaks:
                field, eval_index, gram = leaks[i]
                why[i] = (field, "contaminated", self._leak_detail(eval_index, gram))
                self.eval_hits[eval_index] += 1
            elif j is not None:
                self.near.keep(j, row)
        if self.near is not None:
            self.near.commit()

    def _leak_detail(self, eval_index: int, gram: tuple[str, ...]) -> str:
        what = f"{len(gram)}-gram" if len(gram) == self.decon.n else "whole short prompt"
        return f"shares {what} {' '.join(gram)[:300]!r} with eval prompt {self.decon.name(eval_index)}"

    def summary(self) -> dict:
        out = {"rows_in": self.rows_in, "quarantined": dict(sorted(self.reasons.items())),
               "seconds": {k: round(v, 2) for k, v in self.seconds.items()}}
        if self.near is not None:
            out["near_dup_index"] = {"rows": self.near.size, "pairs_verified": self.near.candidates,
                                     "mib": round(self.near.nbytes() / 2**20, 1)}
        return out
