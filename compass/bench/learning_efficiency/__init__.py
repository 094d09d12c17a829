"""``compass bench learning-efficiency``: rollout tokens each RL method needs to reach a held-out reward.

Every method starts from the same SFT'd tiny model with the same rollout-token budget and the same
seeds (seed s is seed s for every method), in two regimes (``regimes``): ``paper`` (binary rewards, a
bimodal pass-rate pool, GRPO's zero-variance share z >= 0.5, 4 updates per batch) and ``lowz`` (the
earlier setting, z ~ 0.4). Methods (``methods``): grpo, dapo, greso, ours, and ours minus each of its
parts. Before RL the grader (the SFT model, ``grader``) measures each pool prompt's pass rate; its
tokens are reported apart. Held-out reward only (``heldout``); tokens-to-target, the paired bootstrap
interval of the tokens ratio and the rest of the statistics are pure functions (``stats``).

Modules: ``start`` (world + cached SFT model), ``regimes``, ``methods``, ``grader``, ``scoring``,
``heldout``, ``runner`` (one run; a pool of worker processes), ``stats``, ``summary``, ``signal_vs_n``
(Fig. 3 maths), ``report`` (tables, headline JSON), ``plots``, ``cli``.
"""
from compass.bench.learning_efficiency.cli import main

__all__ = ["main"]
