from stages.rl.config import RLConfig


class ReasoningRLConfig(RLConfig):
    """Phase 1 of RL (ARCHITECTURE §1): the engine's settings on the reasoning prompts."""
