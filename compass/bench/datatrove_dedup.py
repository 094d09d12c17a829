"""datatrove's MinHash deduplication as a peer in ``compass bench data-filter``.

Its four steps (signatures, buckets, clustering, filter) run with ``LocalPipelineExecutor`` in a
temporary folder, on the SFT rows of the bench's Parquet table (text: prompt, a newline, the
response; each task reads a contiguous slice, so datatrove's (file, doc) order is the row order).
Settings matched to the data filter's: 3-word n-grams, 64 buckets of 4 hashes (256 hashes, the
same banding as 64 bands of 4), 64-bit hashes. What cannot match: datatrove has no verification
step (a collision in any bucket makes a duplicate pair) and no threshold; it simplifies text its
own way (lower case, punctuation and digits normalized) before word tokenization.

Two adaptations, both to run it here without changing what it computes:

- word tokenizer: datatrove's English one needs spaCy (not installed); it takes a custom
  ``WordTokenizer``, and this one splits datatrove's simplified text (no punctuation left) on
  whitespace, which is also cheaper than spaCy;
- hashing: datatrove 0.10.1 hands ``str`` to ``xxhash.xxh64_intdigest``, which xxhash 4.1 refuses;
  the step's hash function is given the UTF-8 bytes instead (the same hash value older xxhash
  computed from the string).
"""
from __future__ import annotations

import glob
import os
import struct
import time

import pyarrow.parquet as pq
import xxhash
from datatrove.data import Document
from datatrove.executor import LocalPipelineExecutor
from datatrove.pipeline.dedup.minhash import (MinhashConfig, MinhashDedupBuckets, MinhashDedupCluster,
                                              MinhashDedupFilter, MinhashDedupSignature)
from datatrove.utils.word_tokenizers import WordTokenizer


class WhitespaceTokenizer(WordTokenizer):
    def word_tokenize(self, text: str) -> list[str]:
        return text.split()

    def sent_tokenize(self, text: str) -> list[str]:
        return [text]

    def span_tokenize(self, text: str) -> list[tuple[int, int]]:
        raise NotImplementedError


class SliceReader:
    """A pipeline's first step: rank r of w reads rows [r*n/w, (r+1)*n/w) of the table."""

    def __init__(self, path: str, rows: int):
        self.path, self.rows = path, rows

    def __call__(self, data=None, rank: int = 0, world_size: int = 1):
        lo, hi = rank * self.rows // world_size, (rank + 1) * self.rows // world_size
        pos = 0
        for batch in pq.ParquetFile(self.path).iter_batches(batch_size=8192, columns=["prompt", "response"]):
            if pos >= hi:
                break
            p, r = batch.column(0).to_pylist(), batch.column(1).to_pylist()
            for k in range(max(lo - pos, 0), min(hi - pos, len(p))):
                yield Document(text=f"{p[k]}\n{r[k]}", id=str(pos + k))
            pos += len(p)


def _utf8_xxh64(text: str) -> int:
    return xxhash.xxh64_intdigest(text.encode())


def run(path: str, rows: int, workdir: str, workers: int) -> dict:
    """Deduplicate the first ``rows`` rows; return the wall time of each step and the removed rows."""
    cfg = MinhashConfig(n_grams=3, num_buckets=64, hashes_per_bucket=4)
    reader = SliceReader(path, rows)
    sig = MinhashDedupSignature(f"{workdir}/sigs", config=cfg, language=WhitespaceTokenizer())
    sig._hash_func = _utf8_xxh64
    steps = {
        "signatures": dict(pipeline=[reader, sig], tasks=workers),
        "buckets": dict(pipeline=[MinhashDedupBuckets(f"{workdir}/sigs", f"{workdir}/buckets", config=cfg)],
                        tasks=cfg.num_buckets),
        "cluster": dict(pipeline=[MinhashDedupCluster(f"{workdir}/buckets", f"{workdir}/remove", config=cfg)],
                        tasks=1),
        "filter": dict(pipeline=[reader, MinhashDedupFilter(f"{workdir}/remove")], tasks=workers),
    }
    seconds = {}
    for name, kw in steps.items():
        t0 = time.perf_counter()
        LocalPipelineExecutor(**kw, workers=min(workers, kw["tasks"]), logging_dir=f"{workdir}/logs/{name}",
                              skip_completed=False).run()
        seconds[name] = time.perf_counter() - t0
    removed = []
    for f in sorted(glob.glob(f"{workdir}/remove/*.remove")):
        rank = int(os.path.basename(f).split(".")[0])
        data = open(f, "rb").read()
        start = rank * rows // workers
        removed.extend(start + d for (d,) in struct.iter_unpack("<I", data))
    return {"seconds": seconds, "removed": sorted(removed)}
