"""Run lm-evaluation-harness tasks on an in-memory checkpoint: its numbers beside the gym's.

``run_lm_eval(model, tok, tasks, ...)`` wraps the loaded model in lm-eval's ``HFLM`` (so a checkpoint
loads the way every other stage loads it, ``compass.lm.model_factory.load_checkpoint``) and calls
``lm_eval.simple_evaluate``. It returns, per task, lm-eval's metrics as ``{"metric,filter": value}``
(stderr entries left out; ``samples``: how many documents were scored).

Task names are lm-eval's (``gsm8k``, ``arc_easy``, ...: their datasets come from the Hugging Face
Hub) or those of the task YAMLs under ``include_path`` (a local ``dataset_path: json`` with
``data_files`` runs offline). lm-evaluation-harness is an optional dependency (``make install-test``
installs it; ``pip install lm-eval==0.4.13``).
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import logging
from contextlib import contextmanager
from pathlib import Path
from typing import Sequence


class LmEvalMissing(RuntimeError):
    pass


def include_digest(include_path: str | None) -> str | None:
    """sha256 over the task files under ``include_path`` (path and bytes, sorted): a changed task YAML is a
    new evaluation. None without one; a path that is not a folder is an error naming it."""
    if include_path is None:
        return None
    root = Path(include_path)
    if not root.is_dir():
        raise ValueError(f"lm_eval.include_path {include_path!r} is not a folder of task YAMLs")
    h = hashlib.sha256()
    for f in sorted(p for p in root.rglob("*") if p.is_file()):
        h.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


@contextmanager
def _quiet():
    """lm-eval's request bars follow COMPASS_PROGRESS (it passes tqdm ``disable`` itself, so with bars off they
    go to a discarded stderr; log handlers keep their own stream); its per-batch INFO lines and the warning
    that a loaded model was passed in (which this adapter always does) stay out of the console."""
    from compass.progress import bars_on
    levels = {n: logging.getLogger(n).level for n in ("lm_eval", "lm-eval", "lm_eval.models.huggingface")}
    for n in levels:
        logging.getLogger(n).setLevel(logging.ERROR if n.endswith("huggingface") else logging.WARNING)
    try:
        with contextlib.nullcontext() if bars_on() else contextlib.redirect_stderr(io.StringIO()):
            yield
    finally:
        for n, level in levels.items():
            logging.getLogger(n).setLevel(level)


def run_lm_eval(model, tok, tasks: Sequence[str], *, include_path: str | None = None, limit: int | None = None,
                num_fewshot: int | None = None, batch_size: int = 8, seed: int = 0) -> dict[str, dict]:
    """task -> {"metric,filter": value, ..., "samples": n} for ``model`` (eval mode meanwhile) on ``tasks``."""
    try:
        from lm_eval import simple_evaluate
        from lm_eval.models.huggingface import HFLM
        from lm_eval.tasks import TaskManager
    except ImportError as e:
        raise LmEvalMissing(f"lm-evaluation-harness is not installed ({e}): pip install lm-eval==0.4.13 "
                            "(make install-test installs it)") from None
    was_training = model.training
    model.eval()
    try:
        with _quiet():
            lm = HFLM(pretrained=model, tokenizer=tok, batch_size=batch_size, device=str(model.device))
            manager = TaskManager(include_path=include_path, verbosity="WARNING")
            unknown = [t for t in tasks if t not in manager.all_tasks]
            if unknown:
                raise ValueError(f"lm_eval.tasks: unknown task(s) {unknown}"
                                 + (f" (none under include_path {include_path})" if include_path else
                                    " (set lm_eval.include_path to a folder of task YAMLs)"))
            out = simple_evaluate(model=lm, tasks=list(tasks), task_manager=manager, limit=limit,
                                  num_fewshot=num_fewshot, log_samples=False, bootstrap_iters=0,
                                  random_seed=seed, numpy_random_seed=seed, torch_random_seed=seed,
                                  fewshot_random_seed=seed, verbosity="WARNING")
    finally:
        model.train(was_training)
    results = {}
    for task, metrics in out["results"].items():
        row = {k: float(v) for k, v in metrics.items()
               if "," in k and "_stderr" not in k and isinstance(v, (int, float))}
        row["samples"] = int(out.get("n-samples", {}).get(task, {}).get("effective", metrics.get("sample_len", 0)))
        results[task] = row
    return results
