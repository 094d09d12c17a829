"""Real data import: external sets (Parquet, JSON Lines, JSON, CSV or a ``datasets`` dataset) into the
pipeline's tables through a declared column mapping, with the rows that do not fit quarantined.

config.py (what to read and how columns map), source.py (format, files, content hash), reader.py
(rows in batches), transforms.py (one column spec on one row), mapping.py (one row onto the table
kind), importer.py (the two artifacts, versioned and committed). See docs/import.md.
"""
