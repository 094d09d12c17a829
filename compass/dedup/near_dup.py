"""Exact and near-duplicate detection over a stream of rows, first occurrence kept.

Exact: a 64-bit key of the normalized text, key -> first row (a dict).

Near: MinHash signatures of token shingles (datasketch ``MinHash.bulk``, permutations
shared), banded LSH for candidates, then each candidate is *verified*: the Jaccard
similarity estimated from the two whole signatures must reach the threshold. Verifying
is what keeps distinct items of one template apart: with banding alone, the more
siblings a template has in the index, the likelier one of them collides in some band
(see docs/data_filter.md). Memory is bounded per indexed row: ``bands`` band keys
(8 bytes + a 4-byte slot each) and the signature's low 16 bits (2 bytes a
permutation; two different hash values agree there by chance once in 65536).
"""
from __future__ import annotations

import zlib

import numpy as np
from datasketch import MinHash

MINHASH_SEED = 1
_MIX = np.uint64(0x9E3779B97F4A7C15)          # odd 64-bit constants for the band-key hash
_BAND_SALT = np.uint64(0xD6E8FEB86659FD93)


class ExactIndex:
    """Normalized-text key -> the first row that had it."""

    def __init__(self) -> None:
        self.first: dict[int, int] = {}

    def seen(self, key: int, row: int) -> int | None:
        """The earlier row with this key, or None (and ``row`` becomes the first)."""
        earlier = self.first.setdefault(key, row)
        return None if earlier == row else earlier


def shingles(tokens: list[str], size: int) -> list[bytes]:
    """Contiguous token ``size``-grams as bytes (what MinHash hashes)."""
    if size == 3:   # the default, without slicing: a third faster
        return [f"{a} {b} {c}".encode() for a, b, c in zip(tokens, tokens[1:], tokens[2:])]
    return [" ".join(tokens[i:i + size]).encode() for i in range(len(tokens) - size + 1)]


def signatures(shingle_sets: list[list[bytes]], num_perm: int) -> np.ndarray:
    """MinHash signatures, one row per shingle list: ``(n, num_perm)`` uint32.

    CRC-32 hashes the shingles (stdlib, fast, the same in every process); datasketch mixes
    it (murmur3 finalizer) before its random affine permutations.
    """
    if not shingle_sets:
        return np.empty((0, num_perm), np.uint32)
    sketches = MinHash.bulk(shingle_sets, num_perm=num_perm, seed=MINHASH_SEED, hashfunc=zlib.crc32)
    return np.stack([m.hashvalues for m in sketches]).astype(np.uint32, copy=False)


def band_keys(sigs: np.ndarray, bands: int, groups: np.ndarray | None = None) -> np.ndarray:
    """``(n, bands)`` uint64: a hash of each band's ``num_perm // bands`` values, its band number and
    the row's group (rows of different groups never share a key)."""
    n, num_perm = sigs.shape
    rows = num_perm // bands
    cells = sigs[:, :bands * rows].reshape(n, bands, rows).astype(np.uint64)
    with np.errstate(over="ignore"):
        acc = np.broadcast_to((np.arange(bands, dtype=np.uint64) + np.uint64(1)) * _BAND_SALT, (n, bands)).copy()
        if groups is not None:
            acc ^= (np.asarray(groups, np.uint64) * _MIX)[:, None]
        for j in range(rows):
            acc = (acc ^ cells[:, :, j]) * _MIX
            acc ^= acc >> np.uint64(29)
    return acc


class NearDupIndex:
    """MinHash LSH over the rows kept so far, with every candidate verified.

    Rows are compared only within their group: the data filter groups rows by reference answer,
    since two items of one template with different answers are distinct however alike their text.

    Per batch: ``prepare(sigs, groups)`` finds, all at once, the indexed rows of earlier batches
    and the earlier rows of this batch that share a band key with each row; then, in row order,
    ``match(j)`` returns a kept one whose estimated Jaccard reaches ``threshold`` and
    ``keep(j, row)`` indexes a kept row; ``commit()`` adds the batch's keys as a sorted run.
    Runs are merged like a binary counter (a run is merged into the one before it once it is at
    least half its size) up to ``RUN_CAP`` keys, so small batches cost O(n log n) merging in all
    and no merge needs more than a run's worth of extra memory.
    """

    RUN_CAP = 1 << 23   # keys in a run (about 100 MiB with their slots)

    def __init__(self, threshold: float, num_perm: int, bands: int, max_per_key: int = 16, capacity: int = 1024):
        if not 1 <= bands <= num_perm:
            raise ValueError(f"bands must be in 1..num_perm ({num_perm}), got {bands}")
        self.threshold, self.num_perm, self.bands, self.max_per_key = threshold, num_perm, bands, max_per_key
        self.runs: list[tuple[np.ndarray, np.ndarray]] = []   # sorted band keys, and the slot having each
        # slot -> signature (low 16 bits), slot -> row; ``capacity`` (the input's rows) avoids regrowing:
        # pages never written cost no memory
        self.sig16 = np.empty((max(capacity, 1), num_perm), np.uint16)
        self.slot_row = np.empty(max(capacity, 1), np.int64)
        self.size = 0
        self.candidates = 0                     # pairs verified
        self._reset()

    def _reset(self) -> None:
        self._sig16 = self._keys = None
        self._old: dict[int, list[int]] = {}     # batch position -> slots of earlier batches sharing a key
        self._new: dict[int, list[int]] = {}     # batch position -> earlier positions of this batch sharing one
        self._slot_of: dict[int, int] = {}       # batch position -> slot, for the rows kept

    def prepare(self, sigs: np.ndarray, groups: np.ndarray | None = None) -> None:
        self._reset()
        self._sig16 = (sigs & np.uint32(0xFFFF)).astype(np.uint16)
        self._keys = keys = band_keys(sigs, self.bands, groups)
        if not len(keys):
            return
        flat = keys.ravel()
        order = np.argsort(flat, kind="stable")           # sorted queries: cache-friendly lookups
        sorted_flat = flat[order]
        for run_keys, run_slots in self.runs:
            left = np.searchsorted(run_keys, sorted_flat, "left")
            hit = np.nonzero(run_keys[np.minimum(left, len(run_keys) - 1)] == sorted_flat)[0]   # most queries miss
            right = np.searchsorted(run_keys, sorted_flat[hit], "right")
            for q, lo, hi in zip(hit.tolist(), left[hit].tolist(), right.tolist()):
                hi = min(hi, lo + self.max_per_key)   # a key many rows share: a template, cap it
                self._old.setdefault(int(order[q]) // self.bands, []).extend(run_slots[lo:hi].tolist())
        # equal keys inside the batch: runs in the sorted order (stable, so earlier rows come first)
        same = np.nonzero(sorted_flat[1:] == sorted_flat[:-1])[0]
        if len(same):
            run_start = 0
            prev = -2
            for q in same.tolist():
                if q != prev + 1:
                    run_start = q
                prev = q
                later = int(order[q + 1]) // self.bands
                earlier = [int(order[x]) // self.bands for x in range(max(run_start, q + 1 - self.max_per_key), q + 1)]
                self._new.setdefault(later, []).extend(e for e in earlier if e != later)

    def match(self, j: int) -> tuple[int, float] | None:
        """(earlier row, estimated Jaccard) of the most similar kept row at or above the threshold."""
        cands = set(self._old.get(j, ()))
        cands.update(self._slot_of[e] for e in self._new.get(j, ()) if e in self._slot_of)
        if not cands:
            return None
        slots = np.fromiter(cands, np.int64, len(cands))
        self.candidates += len(slots)
        est = (self.sig16[slots] == self._sig16[j]).mean(axis=1)
        best = int(np.argmax(est))
        if est[best] < self.threshold:
            return None
        return int(self.slot_row[slots[best]]), float(est[best])

    def keep(self, j: int, row: int) -> None:
        if self.size == len(self.slot_row):    # grow by doubling
            self.sig16 = np.concatenate([self.sig16, np.empty_like(self.sig16)])
            self.slot_row = np.concatenate([self.slot_row, np.empty_like(self.slot_row)])
        self.sig16[self.size] = self._sig16[j]
        self.slot_row[self.size] = row
        self._slot_of[j] = self.size
        self.size += 1

    def commit(self) -> None:
        """Merge this batch's kept rows into the sorted index."""
        if self._slot_of:
            kept = np.fromiter(self._slot_of.keys(), np.int64, len(self._slot_of))
            slots = np.fromiter(self._slot_of.values(), np.int32, len(self._slot_of))
            keys = self._keys[kept].ravel()
            slots = np.repeat(slots, self.bands)
            order = np.argsort(keys, kind="stable")
            self.runs.append((keys[order], slots[order]))
            while (len(self.runs) > 1 and 2 * len(self.runs[-1][0]) >= len(self.runs[-2][0])
                   and len(self.runs[-1][0]) + len(self.runs[-2][0]) <= self.RUN_CAP):
                (k1, s1), (k2, s2) = self.runs[-2], self.runs.pop()
                at = np.searchsorted(k1, k2, "right")     # older rows first among equal keys
                self.runs[-1] = (np.insert(k1, at, k2), np.insert(s1, at, s2))
        self._reset()

    def nbytes(self) -> int:
        return sum(k.nbytes + s.nbytes for k, s in self.runs) + self.sig16.nbytes + self.slot_row.nbytes
