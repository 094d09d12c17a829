"""compass-rl command line and benchmarks."""
