"""Preference pairs in: usable rows, quarantined rows (with a reason each), and the held-out split."""
from __future__ import annotations

import json

from compass.gym.genrm_verdict import SWAP, normalize_label
from compass.lm.holdout import is_held_out as _held_out

TEXT_FIELDS = ("prompt", "response_a", "response_b")


def pair_id(row: dict) -> str:
    """The id a pair is reported by: its ``id``, else its row index."""
    return str(row.get("id") or row["row_index"])


def screen_pairs(rows: list[dict], source: str) -> tuple[list[dict], list[dict]]:
    """Split table rows into usable pairs (label normalized to A/B/TIE, ``row_index`` added) and
    quarantine rows (the ``quarantine`` table kind): a label outside {A, B, TIE} after
    ``normalize_label``, or an empty prompt or response, each with a reason naming the bad value."""
    usable, bad = [], []
    for i, r in enumerate(rows):
        why = None
        for f in TEXT_FIELDS:
            v = r.get(f)
            if not isinstance(v, str) or not v.strip():
                why = (f, f"empty {f}: {v!r}")
                break
        label = normalize_label(r.get("label"))
        if why is None and label is None:
            why = ("label", f"label {r.get('label')!r} is not one of A, B, TIE")
        if why is not None:
            bad.append({"source": source, "row_index": i, "field": why[0], "reason": why[1],
                        "row_json": json.dumps(r, ensure_ascii=False, sort_keys=True, default=str)})
        else:
            usable.append({**r, "label": label, "row_index": i})
    return usable, bad


def is_held_out(pair_id: str, fraction: float, seed: int = 0) -> bool:
    """Deterministic split by a hash of the pair's id: the same id is held out in every run."""
    return _held_out(f"{seed}:{pair_id}", fraction)


def split_pairs(rows: list[dict], fraction: float, seed: int = 0) -> tuple[list[dict], list[dict]]:
    """(train, held_out); a row without an id is keyed by its row index."""
    train, held = [], []
    for r in rows:
        (held if is_held_out(str(r.get("id") or f"row-{r.get('row_index')}"), fraction, seed) else train).append(r)
    return train, held


def swapped(row: dict) -> dict:
    """The pair with A and B exchanged (label mapped accordingly)."""
    return {**row, "response_a": row["response_b"], "response_b": row["response_a"], "label": SWAP[row["label"]]}
