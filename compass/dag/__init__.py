"""The pipeline as data (nodes, config, planning); flows/ only walks it."""
