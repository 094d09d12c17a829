"""The data_filter stage: deduplicate, decontaminate, screen and grade the raw data; quarantine the
rest with a reason per row. See stage.py and docs/data_filter.md."""

