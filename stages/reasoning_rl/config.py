from compass.rl.config import RLConfig


class ReasoningRLConfig(RLConfig):
    """Phase 1 of RL (docs/architecture.md §1): the engine's settings on the reasoning prompts."""
