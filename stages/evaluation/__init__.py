"""The evaluation stage: sample a checkpoint on held-out suites, score with the gym's verifiers, write
results and a report. See stage.py."""

