"""Test helpers: hand-made artifacts (committed through the real store, as a foreign producer
would) and the small world config."""
from __future__ import annotations

import json
from typing import Callable

import pyarrow as pa

from compass.store.store import Artifact, ArtifactStore, ArtifactWriter

MATH_VERIFIER = json.dumps({"type": "math_exact"})
MCQ_VERIFIER = json.dumps({"type": "mcq"})
TEST_META = dict(producer="test", stage="test", config_fingerprint="x", code_version="x")


def commit_artifact(store: ArtifactStore, kind: str, name: str, fill: Callable[[ArtifactWriter], None],
                    version: str = "v1") -> Artifact:
    w = store.begin(kind, name, version, **TEST_META)
    fill(w)
    return w.commit()


def commit_table(store: ArtifactStore, kind: str, name: str, table: pa.Table) -> Artifact:
    return commit_artifact(store, kind, name, lambda w: w.write_table(table))


def commit_checkpoint(store: ArtifactStore, name: str, model, tok) -> Artifact:
    from compass.lm.model_factory import save_checkpoint
    return commit_artifact(store, "checkpoint", name, lambda w: save_checkpoint(model, tok, w.dir))


def sum_sft_samples(tok, n: int, seed: int = 0) -> list[tuple[list[int], list[int]]]:
    """``n`` encoded SFT samples "a+b+...=?" -> "<think>a b ...</think>sum" (1-6 terms), all under 256 tokens."""
    import random

    from compass.lm.sft.train import encode_table
    rng = random.Random(seed)
    prompts, responses = [], []
    for _ in range(n):
        a = [rng.randint(1, 99) for _ in range(rng.randint(1, 6))]
        prompts.append("+".join(map(str, a)) + "=?")
        responses.append(f"<think>{' '.join(map(str, a))}</think>{sum(a)}")
    enc, skipped = encode_table(tok, prompts, responses, 256)
    assert skipped == 0
    return enc


SMALL_WORLD = dict(suites={"arithmetic": {"n": 120, "n_eval": 10}, "ecommerce_category": {"n": 60, "n_eval": 10}},
                   n_preference_pairs=30, n_planted=2)


def small_world_config(**over):
    from stages.world.config import WorldConfig
    return WorldConfig(**{**SMALL_WORLD, **over})


def bench_here(name: str, argv: list[str], capsys) -> tuple[dict, str]:
    """`compass bench NAME ARGV` in the test process, as the CLI calls it (a subprocess would start Python and
    torch again: ~5 s of a 2-core machine each); the closing JSON line and the whole output. The torch thread
    count a bench sets is put back, so later tests keep this process's."""
    import torch

    from compass.bench import run_bench
    threads = torch.get_num_threads()
    try:
        rc = run_bench(name, argv)
    finally:
        torch.set_num_threads(threads)
    text = capsys.readouterr().out
    assert rc == 0, text[-3000:]
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return json.loads(lines[-1]), text


def gfm_table_problems(md: str) -> list[str]:
    """Lines of ``md``'s pipe tables whose cell count differs from their table's delimiter row. A browser's GFM
    renderer (the Prefect UI's) shows such a table as raw ``|`` text, e.g. a header cell ``|A|``."""
    import re

    def cells(line: str) -> int:
        return len(re.split(r"(?<!\\)\|", line.strip().strip("|")))
    problems, lines = [], md.splitlines()
    for i, line in enumerate(lines):
        if i and "|" in line and re.fullmatch(r"\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*", line):
            width, j, block = cells(line), i + 1, [lines[i - 1]]
            while j < len(lines) and lines[j].lstrip().startswith("|"):
                block.append(lines[j])
                j += 1
            problems += [f"{cells(r)} cells, not {width}: {r}" for r in block if cells(r) != width]
    return problems
