"""Ranks of one ``torch.distributed`` job: the process group (:mod:`.process_group`) and the Ray launcher
that places them (:mod:`.rank_group`)."""
