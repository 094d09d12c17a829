"""The data filter's per-row work over one batch: everything that needs no other row.

Malformed fields, the row checks, the harm filter, then for each row still alive its
exact-duplicate key, the eval leak it carries and its MinHash signature (with its group: the
normalized reference answer). No state changes from row to row, so the same call runs in the
stage's process (streaming) or on Ray Data workers (``ray_rows.py``); the order-dependent part,
which earlier rows are kept, is decided afterwards in one place (``screen.Screen.decide``).

For ``prompts`` the call also returns the (normalized-prompt key, reference, verifier) of each
row that passed the malformed-field scan: the decision side collects them, first one wins,
so the SFT pass can check teacher answers against them.
"""
from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from compass.dedup.decontam import Decontaminator
from compass.dedup.near_dup import shingles, signatures
from compass.dedup.text import key_of, normalize, tokens_of
from stages.data_filter import quality
from stages.data_filter.config import DataFilterConfig
from stages.data_filter.harm import HarmFilter
from stages.data_filter.quality import Rejection

TEXT_FIELDS = {"sft": ("prompt", "response"), "prompts": ("prompt",)}
SHINGLES_PER_CHUNK = 1_000_000   # MinHash shingles held at once (about 60 MiB), however long the rows
Refs = dict[int, tuple[str, str]]   # normalized-prompt key -> (reference, verifier), from the prompts table
Leak = tuple[str, int, tuple[str, ...]]   # field, eval prompt index, shared n-gram


@dataclass
class Features:
    """One batch's per-row results; positions are row positions in the batch."""
    why: list[Rejection | None]                 # after the row checks and the harm filter
    keys: dict[int, int]                        # alive row -> exact-duplicate key
    leaks: dict[int, Leak]                      # alive row -> the eval leak found
    sig_rows: list[int]                         # alive rows with a MinHash signature, in order
    sigs: np.ndarray                            # (len(sig_rows), num_perm) uint32
    groups: np.ndarray                          # (len(sig_rows),) uint64: reference-answer key, 0 = none
    refs: list[tuple[int, str, str]] = field(default_factory=list)   # prompts: (key, reference, verifier)


class RowWork:
    """``work(batch) -> Features``: pure per row; picklable (Ray ships it to its workers)."""

    def __init__(self, cfg: DataFilterConfig, slot: str, decon: Decontaminator, harm: HarmFilter,
                 refs: Refs | None = None):
        self.cfg, self.slot, self.decon, self.harm = cfg, slot, decon, harm
        self.fields = TEXT_FIELDS[slot]
        self.refs: Refs = refs if refs is not None else {}
        self.seconds: dict[str, float] = defaultdict(float)

    def _tick(self, phase: str, t0: float) -> float:
        t = time.perf_counter()
        self.seconds[phase] += t - t0
        return t

    def __call__(self, batch: pa.RecordBatch) -> Features:
        t = time.perf_counter()
        cols, why = quality.scan_batch(batch, self.cfg.max_field_chars)
        t = self._tick("scan", t)
        norm, answer_of, refs = self._row_checks(cols, why)
        t = self._tick("quality", t)
        self._harm(norm, why)
        self._tick("harm", t)
        alive = [i for i, w in enumerate(why) if w is None]
        return self._features(alive, norm, answer_of, why, refs)

    def _row_checks(self, cols: dict[str, list], why: list):
        """Checks of each row on its own (fills ``why``); the normalized text fields, the
        reference answer each row is judged by, and (prompts) the references to collect."""
        n, cfg = len(why), self.cfg
        absent = [None] * n
        prompts, references, verifiers = cols["prompt"], cols.get("reference", absent), cols.get("verifier", absent)
        norm_prompts = [normalize(p) if w is None else "" for p, w in zip(prompts, why)]
        refs = []
        if self.slot == "prompts":
            refs = [(key_of(norm_prompts[i]), references[i], verifiers[i]) for i in range(n)
                    if why[i] is None and references[i] and verifiers[i]]
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
        return norm, answer_of, refs

    def _harm(self, norm: dict[str, list[str]], why: list) -> None:
        for fld in self.fields:
            alive = [i for i, w in enumerate(why) if w is None]
            for i, hit in zip(alive, self.harm([norm[fld][i] for i in alive])):
                if hit is not None:
                    why[i] = (fld, "harmful", hit.detail())

    def _features(self, alive: list[int], norm: dict[str, list[str]], answer_of: list[str | None],
                  why: list, refs: list) -> Features:
        """Per row: the exact-duplicate key, the eval leak found, and its MinHash signature. Row by
        row, so that only one row's tokens and a bounded chunk of shingles are held: Long-CoT
        traces run to thousands of tokens."""
        cfg = self.cfg
        keys: dict[int, int] = {}
        leaks: dict[int, Leak] = {}
        sig_rows: list[int] = []
        docs: list[list[bytes]] = []
        groups: list[int] = []
        chunks: list[np.ndarray] = []
        held = 0
        for i in alive:
            t = time.perf_counter()
            ftoks = [tokens_of(norm[f][i]) for f in self.fields]
            keys[i] = key_of(*(norm[f][i] for f in self.fields))
            t = self._tick("tokens", t)
            for fld, tk in zip(self.fields, ftoks):
                hit = self.decon.hit(tk)
                if hit is not None:
                    leaks[i] = (fld, *hit)
                    break
            t = self._tick("decontam", t)
            if not cfg.near_dedup:
                continue
            all_toks = [tok for tk in ftoks for tok in tk]
            if len(all_toks) >= cfg.near_dup_min_tokens:
                sig_rows.append(i)
                docs.append(shingles(all_toks, cfg.shingle_size))
                held += len(docs[-1])
                # items with different reference answers are distinct, however alike their text
                groups.append(key_of(normalize(answer_of[i])) if answer_of[i] else 0)
                if held >= SHINGLES_PER_CHUNK:
                    chunks.append(signatures(docs, cfg.minhash_num_perm))
                    docs, held = [], 0
            self._tick("minhash", t)
        t = time.perf_counter()
        chunks.append(signatures(docs, cfg.minhash_num_perm))
        self._tick("minhash", t)
        return Features(why, keys, leaks, sig_rows, np.concatenate(chunks), np.array(groups, np.uint64), refs)


# -- Features as Arrow columns: how they travel from Ray workers to the driver ---------------
FEATURE_SCHEMA = pa.schema([
    ("why_field", pa.string()), ("why_reason", pa.string()), ("why_detail", pa.string()),
    ("key", pa.uint64()), ("leak_field", pa.string()), ("leak_eval", pa.int64()),
    ("leak_gram", pa.list_(pa.string())), ("sig", pa.binary()), ("group", pa.uint64()),
    ("ref_key", pa.uint64()), ("ref", pa.string()), ("ref_verifier", pa.string())])


def to_arrow(f: Features) -> pa.Table:
    """One row per input row. ``refs`` ride on the first rows (they are fewer than the rows)."""
    n = len(f.why)
    sig_at = {i: k for k, i in enumerate(f.sig_rows)}
    sigs = [f.sigs[sig_at[i]].tobytes() if i in sig_at else None for i in range(n)]
    groups = [int(f.groups[sig_at[i]]) if i in sig_at else None for i in range(n)]
    refs = f.refs + [(None, None, None)] * (n - len(f.refs))
    leak = [f.leaks.get(i) for i in range(n)]
    return pa.table([
        [w[0] if w else None for w in f.why], [w[1] if w else None for w in f.why],
        [w[2] if w else None for w in f.why], [f.keys.get(i) for i in range(n)],
        [x[0] if x else None for x in leak], [x[1] if x else None for x in leak],
        [list(x[2]) if x else None for x in leak], sigs, groups,
        [r[0] for r in refs], [r[1] for r in refs], [r[2] for r in refs]], schema=FEATURE_SCHEMA)


def from_arrow(t: pa.Table, num_perm: int) -> Features:
    c = {name: t.column(name).to_pylist() for name in FEATURE_SCHEMA.names if name != "sig"}
    why = [(fld, r, d) if r is not None else None for fld, r, d in zip(c["why_field"], c["why_reason"], c["why_detail"])]
    keys = {i: k for i, k in enumerate(c["key"]) if k is not None}
    leaks = {i: (fld, e, tuple(g)) for i, (fld, e, g) in enumerate(zip(c["leak_field"], c["leak_eval"], c["leak_gram"]))
             if fld is not None}
    sig_col = t.column("sig")
    sig_rows = [i for i, v in enumerate(sig_col.is_valid().to_pylist()) if v]
    sigs = (np.frombuffer(b"".join(sig_col.take(sig_rows).to_pylist()), np.uint32).reshape(len(sig_rows), num_perm)
            if sig_rows else np.empty((0, num_perm), np.uint32))
    groups = np.array([c["group"][i] for i in sig_rows], np.uint64)
    refs = [(k, r, v) for k, r, v in zip(c["ref_key"], c["ref"], c["ref_verifier"]) if k is not None]
    return Features(why, keys, leaks, sig_rows, sigs, groups, refs)
