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

import pyarrow as pa

from compass.dedup.decontam import Decontaminator
from compass.dedup.near_dup import ExactIndex, NearDupIndex
from stages.data_filter.config import DataFilterConfig
from stages.data_filter.harm import HarmFilter
from stages.data_filter.quality import Rejection
from stages.data_filter.row_work import Features, Refs, RowWork


class Screen:
    """The state of one source's pass: duplicate indexes, counts, timings.

    ``batch(batch)`` screens a batch in this process; ``decide(batch, features)`` takes the per-row
    work done elsewhere (Ray workers, ``ray_rows.py``) and makes the same decisions."""

    def __init__(self, cfg: DataFilterConfig, slot: str, decon: Decontaminator, harm: HarmFilter,
                 refs: Refs | None = None, rows_hint: int = 1024):
        self.cfg, self.slot, self.decon = cfg, slot, decon
        self.refs: Refs = refs if refs is not None else {}
        self.work = RowWork(cfg, slot, decon, harm, self.refs)
        self.exact = ExactIndex()
        self.near = (NearDupIndex(cfg.near_dup_threshold, cfg.minhash_num_perm, cfg.minhash_bands,
                                  capacity=rows_hint) if cfg.near_dedup else None)
        self.rows_in = 0
        self.schema: pa.Schema | None = None      # of the batches seen
        self.reasons: Counter = Counter()
        self.eval_hits: Counter = Counter()       # eval prompt index -> rows that leaked it
        self.seconds: dict[str, float] = defaultdict(float)

    def batch(self, batch: pa.RecordBatch) -> list[Rejection | None]:
        """Each row's rejection (None = kept)."""
        return self.decide(batch, self.work(batch))

    def decide(self, batch: pa.RecordBatch, f: Features) -> list[Rejection | None]:
        """In row order, since what was kept before decides what is a copy."""
        t = time.perf_counter()
        start = self.rows_in
        self.rows_in += batch.num_rows
        self.schema = batch.schema
        for key, ref, ver in f.refs:
            self.refs.setdefault(key, (ref, ver))
        why = list(f.why)
        sig_of = {i: j for j, i in enumerate(f.sig_rows)}
        if self.near is not None:
            self.near.prepare(f.sigs, f.groups)
        for i, key in f.keys.items():
            row = start + i
            earlier = self.exact.seen(key, row)
            if earlier is not None:
                why[i] = (None, "duplicate", f"same normalized text as row {earlier}")
                continue
            j = sig_of.get(i)
            m = self.near.match(j) if j is not None else None
            if m is not None:
                why[i] = (None, "near_duplicate", f"estimated Jaccard {m[1]:.2f} with row {m[0]}")
            elif i in f.leaks:
                field, eval_index, gram = f.leaks[i]
                why[i] = (field, "contaminated", self._leak_detail(eval_index, gram))
                self.eval_hits[eval_index] += 1
            elif j is not None:
                self.near.keep(j, row)
        if self.near is not None:
            self.near.commit()
        self.reasons.update(w[1] for w in why if w is not None)
        self.seconds["lsh"] += time.perf_counter() - t
        return why

    def _leak_detail(self, eval_index: int, gram: tuple[str, ...]) -> str:
        what = f"{len(gram)}-gram" if len(gram) == self.decon.n else "whole short prompt"
        return f"shares {what} {' '.join(gram)[:300]!r} with eval prompt {self.decon.name(eval_index)}"

    def summary(self) -> dict:
        seconds = {**self.work.seconds, "lsh": self.seconds["lsh"]}   # work.seconds: this process's share
        out = {"rows_in": self.rows_in, "quarantined": dict(sorted(self.reasons.items())),
               "seconds": {k: round(v, 2) for k, v in seconds.items()}}
        if self.near is not None:
            out["near_dup_index"] = {"rows": self.near.size, "pairs_verified": self.near.candidates,
                                     "mib": round(self.near.nbytes() / 2**20, 1)}
        return out
