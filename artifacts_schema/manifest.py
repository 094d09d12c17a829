"""The manifest: the commit marker and the description of one artifact version.

A version directory without ``manifest.json`` does not exist for readers. The
manifest is written last, after every file it lists is in place.
"""
from __future__ import annotations

from datetime import datetime, timezone

from pydantic import BaseModel, ConfigDict, Field

MANIFEST_FILE = "manifest.json"
MANIFEST_SCHEMA_VERSION = 1


class FileEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str = Field(description="path relative to the version directory")
    size: int
    sha256: str


class InputRef(BaseModel):
    model_config = ConfigDict(extra="forbid")
    slot: str = Field(description="the consuming stage's name for this input")
    uri: str
    kind: str
    name: str
    version: str


class Manifest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    schema_version: int = MANIFEST_SCHEMA_VERSION
    kind: str = Field(description="table kind (prompts, sft_samples, ...) or checkpoint / report")
    name: str
    version: str
    producer: str = Field(description="the stage run that wrote it, e.g. sft_longcot (stage sft)")
    stage: str
    config_fingerprint: str
    code_version: str
    inputs: list[InputRef] = []
    files: list[FileEntry] = []
    rows: int | None = Field(default=None, description="row count, for tables")
    table_schema: str | None = Field(default=None, description="schema id, for tables, e.g. prompts/v1")
    payload_dir: str = Field(description="sub-directory holding the files of the committed attempt")
    created_at: str = Field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))
    extra: dict = Field(default_factory=dict, description="stage-specific metadata (metrics, steps, ...)")
