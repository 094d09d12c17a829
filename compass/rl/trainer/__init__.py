"""Trainer backends: the interface and registry (base), torch, Megatron, the Ray actor, and the teacher-forcing batch."""
