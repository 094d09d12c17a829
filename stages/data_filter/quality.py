"""Row checks that need no other row: malformed fields, reasoning structure, answers.

A check returns a ``Rejection`` (field, reason, detail) or None. Malformed fields are found
per batch with Arrow kernels (``scan_batch``), so a clean row costs no Python:

- ``invalid_text``: bytes that are not UTF-8 (an encoded lone surrogate included), U+FFFD
  replacement characters (a bad decode upstream), NUL and other control characters
  (C0 except tab and line breaks, DEL, C1);
- ``too_long``: more than ``max_field_chars`` characters.

A null in an optional column (``reference``, ``verifier``, ``difficulty``, extra columns)
reads as absent; a required column cannot hold nulls (the schema refuses them on read).
"""
from __future__ import annotations

import re

import pyarrow as pa
import pyarrow.compute as pc

from compass.gym.score import (THINK_CLOSE, THINK_OPEN, final_answer, is_judged, needs_judge, needs_reference,
                               parse_verifier, score)

Rejection = tuple[str | None, str, str]   # field, reason, detail

_BAD_CHARS_RE2 = r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x{9f}\x{fffd}]"
_BAD_CHARS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ufffd\ud800-\udfff]")


def _bad_char_detail(text: str) -> str:
    m = _BAD_CHARS.search(text)
    if m is None:
        return "invalid text"
    c = m.group()
    what = ("replacement character (a bad decode upstream)" if c == "\ufffd"
            else "lone surrogate" if "\ud800" <= c <= "\udfff" else "control character")
    return f"{what} U+{ord(c):04X} at character {m.start()}"


def _decode_invalid(col: pa.Array) -> tuple[list[str | None], dict[int, str]]:
    """Values of a string column that holds invalid UTF-8: readable text, and what is wrong where."""
    values, bad = [], {}
    for i, raw in enumerate(col.view(pa.binary()).to_pylist()):
        if raw is None:
            values.append(None)
            continue
        try:
            values.append(raw.decode("utf-8"))
            continue
        except UnicodeDecodeError as e:
            err = e
        try:
            text = raw.decode("utf-8", "surrogatepass")        # CESU-style encoded surrogates
            bad[i] = _bad_char_detail(text)
        except UnicodeDecodeError:
            bad[i] = f"invalid UTF-8 byte 0x{raw[err.start]:02x} at byte {err.start}"
        values.append(raw.decode("utf-8", "backslashreplace"))
    return values, bad


def scan_batch(batch: pa.RecordBatch, max_chars: int) -> tuple[dict[str, list], list[Rejection | None]]:
    """Every column as Python values (text decoded safely) and each row's malformed-field rejection."""
    n = batch.num_rows
    why: list[Rejection | None] = [None] * n
    cols: dict[str, list] = {}
    for name, col in zip(batch.schema.names, batch.columns):
        if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
            cols[name] = col.to_pylist()
            continue
        try:
            col.validate(full=True)
        except pa.ArrowInvalid:
            cols[name], bad = _decode_invalid(col)
            for i, detail in bad.items():
                why[i] = why[i] or (name, "invalid_text", detail)
            bad_chars = [i for i, v in enumerate(cols[name]) if v is not None and i not in bad and _BAD_CHARS.search(v)]
            long_rows = [i for i, v in enumerate(cols[name]) if v is not None and len(v) > max_chars]
        else:
            cols[name] = col.to_pylist()
            bad_chars = _true_rows(pc.match_substring_regex(col, _BAD_CHARS_RE2))
            long_rows = _true_rows(pc.greater(pc.utf8_length(col), max_chars))
        for i in bad_chars:
            why[i] = why[i] or (name, "invalid_text", _bad_char_detail(cols[name][i]))
        for i in long_rows:
            why[i] = why[i] or (name, "too_long", f"{len(cols[name][i])} characters > max_field_chars {max_chars}")
    return cols, why


def _true_rows(mask: pa.Array) -> list[int]:
    return pc.indices_nonzero(pc.fill_null(mask, False)).to_pylist() if pc.any(mask).as_py() else []


def think_reason(response: str) -> str | None:
    """Structural check of a reasoning response; None when well formed or not a reasoning response."""
    opened, closed = response.rfind(THINK_OPEN), response.rfind(THINK_CLOSE)
    if opened >= 0 and opened > closed:
        return "unclosed_think"
    if closed >= 0 and THINK_OPEN not in response:
        return "stray_think_close"
    return None


def parse_spec(verifier: str | None) -> tuple[dict | None, str | None]:
    """(spec, None), or (None, why it is not a verifier spec the gym knows)."""
    try:
        return parse_verifier(verifier), None
    except ValueError as e:
        return None, str(e)


def answer_reason(response: str, reference: str | None, spec: dict) -> Rejection | None:
    """``wrong_answer`` when the gym scores the response below 1 against what it needs."""
    if is_judged(spec) or (needs_reference(spec) and not reference):
        return None   # a learned judge cannot score offline; a reference-based one needs the reference
    try:
        reward = score(spec, response, reference or "")
    except ValueError as e:   # a spec or reference this verifier cannot read
        return "verifier", "bad_verifier", str(e)
    if reward >= 1.0:
        return None
    return "response", "wrong_answer", (f"final answer {final_answer(response)[:200]!r}, "
                                        f"reference {(reference or '')[:200]!r}, score {reward:g}")


def sft_reason(prompt: str, response: str, reference: str | None, verifier: str | None,
               check_answers: bool) -> Rejection | None:
    """Checks of one SFT row, in order; ``reference``/``verifier`` may come from the prompts table."""
    if not prompt.strip():
        return "prompt", "empty_prompt", ""
    if not response.strip():
        return "response", "empty_response", ""
    why = think_reason(response)
    if why:
        return "response", why, ""
    if not final_answer(response):
        return "response", "empty_answer", ""
    if not verifier:
        return None
    spec, err = parse_spec(verifier)
    if spec is None:
        return "verifier", "bad_verifier", err
    return answer_reason(response, reference, spec) if check_answers else None


def prompt_reason(prompt: str, reference: str | None, verifier: str | None,
                  require_reference: bool) -> Rejection | None:
    """Checks of one RL prompt row, in order."""
    if not prompt.strip():
        return "prompt", "empty_prompt", ""
    spec, err = parse_spec(verifier) if verifier else (None, "no verifier")
    if require_reference and not (reference or "").strip() and (spec is None or needs_reference(spec)):
        return "reference", "missing_reference", ""
    if spec is None and (verifier or require_reference):
        return "verifier", "bad_verifier", err
    if spec is not None and needs_judge(spec):   # the RL stages score prompts with rules and programs only
        return "verifier", "bad_verifier", (f"verifier '{spec['type']}' is the learned judge, which no RL stage "
                                            f"scores prompts with yet (product titles by rules: 'title_rules')")
    return None
