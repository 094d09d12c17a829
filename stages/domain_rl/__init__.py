"""The domain_rl stage (RL phase 2): the RL engine on the domain prompts plus the phase-1 carryover;
takes the GenRM checkpoint but does not use the judge yet. See stage.py."""

