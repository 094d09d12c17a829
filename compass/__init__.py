"""compass-rl command line and benchmarks."""
from compass import transformers_without_sklearn as _transformers_without_sklearn

_transformers_without_sklearn.install()     # before anything imports transformers (why: that module's docstring)
