"""The RL maths as pure functions registered by name: advantage estimators, policy losses, entropy scaling, advantage flips."""
