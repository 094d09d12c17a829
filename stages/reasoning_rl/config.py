from stages.rl.config import RLConfig


class ReasoningRLConfig(RLConfig):
    pass
