"""compass-rl command line and benchmarks."""
from compass import transformers_import as _transformers_import

_transformers_import.install()     # before anything imports transformers (why: that module's docstring)
