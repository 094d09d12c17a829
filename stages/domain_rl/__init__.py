"""The domain_rl stage (RL phase 2): the RL engine on the domain prompts plus the phase-1 carryover;
open-ended prompts judged by the GenRM checkpoint. See stage.py."""

