"""Difficulty grading of RL prompts by measured pass rate (paper §2.2).

A grader model samples ``k`` responses per prompt; the gym scores them; the
pass rate (share of responses with score 1) maps to a level 1 (easy) .. 5
(hard) through ``thresholds``. With real data, name any Hugging Face
checkpoint in ``grading.model`` and it grades as it is. In the default world
the random base solves nothing, so every prompt would come out "hardest":
instead a grader is trained for ``train_steps`` SFT steps from the base on
the SFT rows the filter kept, which takes about a minute on 2 cores and
learns the easy tiers first — exactly the signal difficulty needs.

The generator's own knob, when the prompts carry one, is kept in
``difficulty_knob`` and its rank correlation with the measured level is
reported: a check that grading measures something real.
"""
from __future__ import annotations

import logging
import math
from pathlib import Path

import pyarrow as pa
from pydantic import Field

from compass.config import ComputeSettings, StrictModel

log = logging.getLogger("compass.data_filter")


class GradingConfig(ComputeSettings):
    """How RL prompts get their difficulty level."""
    enabled: bool = Field(True, description="grade rl_prompts; off = difficulty stays as given (or null)")
    model: str | None = Field(None, description="local Hugging Face checkpoint folder to grade with as is; "
                                                "unset = train a grader from the base checkpoint on the kept "
                                                "SFT rows (the default world's random base solves nothing)")
    train_steps: int = Field(200, ge=0, description="SFT steps of the trained grader")
    batch_size: int = Field(16, ge=1)
    lr: float = Field(1e-3, gt=0)
    max_len: int = Field(256, ge=8, description="SFT pairs longer than this (tokens) are left out of training")
    k: int = Field(4, ge=1, description="samples per prompt")
    temperature: float = Field(1.0, ge=0)
    max_new_tokens: int = Field(96, ge=1)
    prompts_per_batch: int = Field(32, ge=1, description="prompts sampled together")
    max_prompts: int | None = Field(None, ge=1, description="grade at most this many prompts (the first ones); "
                                                            "the rest keep a null difficulty")
    thresholds: list[float] = Field([0.8, 0.6, 0.4, 0.2], min_length=4, max_length=4,
                                    description="pass rate >= thresholds[0] is level 1, >= [1] level 2, ... "
                                                "below the last is level 5")
    seed: int = 0


def level(pass_rate: float, thresholds: list[float]) -> int:
    """Pass rate in [0, 1] -> difficulty 1 (solved almost always) .. 5 (almost never)."""
    for i, t in enumerate(thresholds):
        if pass_rate >= t:
            return i + 1
    return len(thresholds) + 1


def spearman(xs: list[float], ys: list[float]) -> float | None:
    """Rank correlation with average ranks for ties; None when either side is constant."""
    def ranks(v: list[float]) -> list[float]:
        order = sorted(range(len(v)), key=lambda i: v[i])
        r = [0.0] * len(v)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and v[order[j + 1]] == v[order[i]]:
                j += 1
            for m in range(i, j + 1):
                r[order[m]] = (i + j) / 2
            i = j + 1
        return r
    if len(xs) < 2:
        return None
    rx, ry = ranks(xs), ranks(ys)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    vx, vy = sum((a - mx) ** 2 for a in rx), sum((b - my) ** 2 for b in ry)
    return None if vx == 0 or vy == 0 else cov / math.sqrt(vx * vy)


def _grader(cfg: GradingConfig, base_dir: Path | None, sft: pa.Table):
    from compass.lm.model_factory import load_checkpoint
    if cfg.model:
        path = Path(cfg.model)
        if not path.is_dir():
            raise ValueError(f"grading.model: '{cfg.model}' is not a local checkpoint folder")
        log.info("grading with the checkpoint %s as is", path)
        return load_checkpoint(path), {"grader": str(path), "grader_trained_steps": 0}
    if base_dir is None:
        raise ValueError("grading needs a model: set grading.model, or give the stage a 'base' checkpoint")
    model, tok = load_checkpoint(base_dir)
    info = {"grader": "trained from base", "grader_trained_steps": 0}
    if cfg.train_steps and sft.num_rows:
        from compass.lm.sft.train import encode_table, train_sft
        encoded, skipped = encode_table(tok, sft.column("prompt").to_pylist(), sft.column("response").to_pylist(),
                                        cfg.max_len)
        if encoded:
            log.info("training the grader: %d steps on %d kept SFT rows (%d too long)", cfg.train_steps,
                     len(encoded), skipped)
            m = train_sft(model, tok, encoded, steps=cfg.train_steps, batch_size=cfg.batch_size, lr=cfg.lr,
                          warmup_steps=10, weight_decay=0.0, grad_clip=1.0, seed=cfg.seed,
                          log_every=max(1, cfg.train_steps // 4), logger=log, desc="grader",
                          device=cfg.device, precision=cfg.precision)
            info.update(grader_trained_steps=cfg.train_steps, grader_final_loss=round(m["losses"][-1], 4),
                        grader_train_s=round(m["train_s"], 1))
    return (model, tok), info


def grade(cfg: GradingConfig, prompts: pa.Table, sft: pa.Table, base_dir: Path | None) -> tuple[pa.Table, dict]:
    """``prompts`` with ``difficulty`` (1..5, null when ungraded), ``pass_rate`` and
    ``difficulty_knob`` (the difficulty the rows came with); plus a report."""
    from compass.lm.chat import sample
    from compass.progress import progress
    from compass.gym.score import score

    n = prompts.num_rows if cfg.max_prompts is None else min(cfg.max_prompts, prompts.num_rows)
    knob = prompts.column("difficulty").cast(pa.int32())
    if not cfg.enabled or n == 0:
        return prompts, {"graded": 0}
    (model, tok), info = _grader(cfg, base_dir, sft)
    rows = prompts.select(["prompt", "reference", "verifier"]).slice(0, n).to_pylist()
    rates: list[float] = []
    bar = progress(range(0, n, cfg.prompts_per_batch), desc="grading", unit="batch")
    for start in bar:
        chunk = rows[start:start + cfg.prompts_per_batch]
        outs = sample(model, tok, [r["prompt"] for r in chunk], n=cfg.k, max_new_tokens=cfg.max_new_tokens,
                      temperature=cfg.temperature, seed=cfg.seed + start)
        for r, samples in zip(chunk, outs):
            wins = 0
            for s in samples:
                try:
                    wins += score(r["verifier"], s["text"], r["reference"]) >= 1.0
                except ValueError:  # a spec the filter let through but cannot score: ungradable
                    pass
            rates.append(wins / cfg.k)
    levels = [level(p, cfg.thresholds) for p in rates] + [None] * (prompts.num_rows - n)
    pass_rates = rates + [None] * (prompts.num_rows - n)

    out = prompts
    for name, values, typ in (("difficulty", levels, pa.int32()), ("pass_rate", pass_rates, pa.float64())):
        out = out.set_column(out.schema.get_field_index(name), pa.field(name, typ, True), pa.array(values, typ))
    if "difficulty_knob" not in out.column_names:
        out = out.append_column(pa.field("difficulty_knob", pa.int32(), True), knob)

    by_level = {str(lv): levels.count(lv) for lv in range(1, 6)}
    pairs = [(k, lv) for k, lv in zip(knob.to_pylist()[:n], levels[:n]) if k is not None]
    rho = spearman([float(a) for a, _ in pairs], [float(b) for _, b in pairs]) if pairs else None
    report = {**info, "graded": n, "k": cfg.k, "mean_pass_rate": round(sum(rates) / n, 4),
              "difficulty_levels": by_level,
              "knob_level_spearman": None if rho is None else round(rho, 3)}
    log.info("graded %d prompts (k=%d): mean pass rate %.3f, levels %s, rank correlation with the "
             "generator's knob %s", n, cfg.k, report["mean_pass_rate"], by_level, report["knob_level_spearman"])
    return out, report
