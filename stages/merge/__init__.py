"""The merge stage: mergekit merges (TIES, task arithmetic, DARE-TIES) of the thinking and domain SFT
checkpoints, with a dev-scored sweep. See stage.py and docs/merge.md."""

