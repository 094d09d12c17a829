"""Rollout backends: the interface and registry (base), the native, hf and vLLM backends, the Ray pool, the evaluation sampler, detokenization."""
