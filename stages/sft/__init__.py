"""The sft stage: fine-tune a checkpoint on an ``sft_samples`` table (run twice: Long-CoT and domain).
See stage.py and docs/sft.md."""

