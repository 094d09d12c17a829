"""One Arrow schema per table kind: the columns every producer must write.

Extra columns are allowed and kept (a stage may add its own), the listed ones
are required with the listed type family. ``conform`` is used on write and on
read, so a table that drifted from its contract fails where it is touched,
naming the artifact and the column.
"""
from __future__ import annotations

import pyarrow as pa
import pyarrow.types as pat


class SchemaError(ValueError):
    """A table does not match its declared schema."""


def _f(name: str, typ: pa.DataType, nullable: bool = False) -> pa.Field:
    return pa.field(name, typ, nullable=nullable)


TABLE_SCHEMAS: dict[str, pa.Schema] = {
    # A prompt for RL or evaluation: verifiable through `verifier`.
    "prompts": pa.schema([
        _f("id", pa.string()),
        _f("domain", pa.string()),
        _f("task", pa.string()),
        _f("language", pa.string()),
        _f("prompt", pa.string()),
        _f("reference", pa.string()),          # JSON-encoded when structured
        _f("verifier", pa.string()),           # verifier spec, JSON
        _f("difficulty", pa.int32(), True),    # 1 (easy) .. 5 (hard), null = ungraded
        _f("pass_rate", pa.float64(), True),   # measured by the grader model
    ]),
    # A supervised sample: the response is a teacher trace.
    "sft_samples": pa.schema([
        _f("id", pa.string()),
        _f("domain", pa.string()),
        _f("task", pa.string()),
        _f("language", pa.string()),
        _f("prompt", pa.string()),
        _f("response", pa.string()),
    ]),
    # Two responses to one prompt with a ternary verdict.
    "preference_pairs": pa.schema([
        _f("id", pa.string()),
        _f("prompt", pa.string()),
        _f("response_a", pa.string()),
        _f("response_b", pa.string()),
        _f("label", pa.string()),              # A | B | TIE
    ]),
    "rollouts": pa.schema([
        _f("step", pa.int64()),
        _f("prompt_id", pa.string()),
        _f("sample_idx", pa.int32()),
        _f("response", pa.string()),
        _f("reward", pa.float64()),
        _f("num_tokens", pa.int32()),
    ]),
    # What RL measured per prompt: the carryover filter reads it.
    "prompt_stats": pa.schema([
        _f("prompt_id", pa.string()),
        _f("domain", pa.string()),
        _f("task", pa.string()),
        _f("n_samples", pa.int32()),
        _f("pass_rate", pa.float64()),
        _f("mean_reward", pa.float64()),
        _f("zero_variance", pa.bool_()),
    ]),
    "eval_results": pa.schema([
        _f("model", pa.string()),              # artifact URI of the evaluated checkpoint
        _f("suite", pa.string()),
        _f("prompt_id", pa.string()),
        _f("sample_idx", pa.int32()),
        _f("response", pa.string()),
        _f("score", pa.float64()),
        _f("correct", pa.bool_()),
    ]),
    # Rows a stage rejected, with the reason: nothing is lost silently.
    # One row per (merge candidate, dev suite): the merge stage's sweep, and which candidate it kept.
    "merge_sweep": pa.schema([
        _f("candidate", pa.string()),          # e.g. "ties w=0.70"
        _f("method", pa.string()),             # ties | task_arithmetic | dare_ties | parent
        _f("thinking_weight", pa.float64(), True),
        _f("domain_weight", pa.float64(), True),
        _f("density", pa.float64(), True),
        _f("suite", pa.string()),              # a dev suite, or "mean"
        _f("score", pa.float64()),             # mean verifier score on it
        _f("prompts", pa.int64()),
        _f("selected", pa.bool_()),
    ]),
    # One row per (judge, held-out preference pair): GenRM and baseline verdicts, scored.
    "judgements": pa.schema([
        _f("judge", pa.string()),              # genrm | bradley_terry | ...
        _f("pair_id", pa.string()),
        _f("label", pa.string()),              # A | B | TIE
        _f("verdict", pa.string(), True),      # null = no well-formed verdict
        _f("verdict_swapped", pa.string(), True),  # on the pair with A and B swapped, mapped back
        _f("correct", pa.bool_()),
        _f("consistent", pa.bool_(), True),    # verdict == verdict_swapped
    ]),
    "quarantine": pa.schema([
        _f("source", pa.string()),             # input artifact or file
        _f("row_index", pa.int64()),
        _f("field", pa.string(), True),
        _f("reason", pa.string()),
        _f("row_json", pa.string()),
    ]),
}

SCHEMA_VERSION = 1


def schema_id(kind: str) -> str:
    return f"{kind}/v{SCHEMA_VERSION}"


def table_schema(kind: str) -> pa.Schema:
    try:
        return TABLE_SCHEMAS[kind]
    except KeyError:
        raise SchemaError(f"unknown table kind '{kind}' (known: {', '.join(sorted(TABLE_SCHEMAS))})") from None


def _family(t: pa.DataType) -> str:
    if pat.is_dictionary(t):  # e.g. a pandas categorical: judged by its values
        return _family(t.value_type)
    if pat.is_string(t) or pat.is_large_string(t) or pat.is_string_view(t):
        return "string"
    if pat.is_integer(t):
        return "integer"
    if pat.is_floating(t):
        return "float"
    if pat.is_boolean(t):
        return "bool"
    return str(t)


def conform(table: pa.Table, kind: str, where: str) -> pa.Table:
    """Return ``table`` with its required columns cast to the contract's types.

    Raises SchemaError naming ``where`` (the artifact or file) and the column
    when a column is missing, of another type family, or null where it may not be.
    """
    schema = table_schema(kind)
    cols = {}
    for field in schema:
        if field.name not in table.column_names:
            raise SchemaError(f"{where}: missing column '{field.name}' (table kind {kind} needs {field.type})")
        if table.column_names.count(field.name) > 1:
            raise SchemaError(f"{where}: column '{field.name}' appears {table.column_names.count(field.name)} times")
        col = table.column(field.name)
        if col.type != field.type:
            if _family(col.type) != _family(field.type) and not (
                _family(field.type) == "float" and _family(col.type) == "integer"
            ) and not pat.is_null(col.type):
                raise SchemaError(
                    f"{where}: column '{field.name}' has type {col.type}, expected {field.type}")
            try:
                col = col.cast(field.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                raise SchemaError(f"{where}: column '{field.name}' cannot be read as {field.type}: {e}") from None
        if not field.nullable and col.null_count:
            raise SchemaError(f"{where}: column '{field.name}' has {col.null_count} null value(s); it may not be null")
        cols[field.name] = col
    out = table
    for name, col in cols.items():
        out = out.set_column(out.schema.get_field_index(name), pa.field(name, col.type, schema.field(name).nullable), col)
    return out
