"""Which prompts a step trains on: prompt data, per-prompt beliefs, the zero-variance skip, length prediction and balancing."""
