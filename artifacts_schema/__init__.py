"""The contract between stages: the manifest and one schema per table kind."""
from artifacts_schema.manifest import MANIFEST_FILE, FileEntry, InputRef, Manifest
from artifacts_schema.tables import TABLE_SCHEMAS, SchemaError, conform, schema_id, table_schema

ARTIFACT_KINDS = (*TABLE_SCHEMAS, "checkpoint", "report")

__all__ = ["MANIFEST_FILE", "FileEntry", "InputRef", "Manifest", "TABLE_SCHEMAS", "SchemaError",
           "conform", "schema_id", "table_schema", "ARTIFACT_KINDS"]
