"""Keep the world's clean items clean in data_filter's eyes.

Items of one template are alike by design, and data_filter judges alikeness
with its own rules (template-aware n-gram decontamination, MinHash
near-duplicates per reference answer). Rather than mirror those rules, the
world asks them: a training item that the filter, at its default settings,
would call a leak of an eval prompt or a near-duplicate of an earlier item is
not generated (another is drawn). So every quarantine in a default run is a
planted bad row, and tests can demand exactly those.
"""
from __future__ import annotations

import numpy as np

from compass.dedup.decontam import Decontaminator
from compass.dedup.settings import DedupSettings
from compass.dedup.near_dup import NearDupIndex, shingles, signatures
from compass.dedup.text import key_of, ngram_tokens, normalize
from stages.world.items import Item


class FilterGuard:
    def __init__(self, cfg: DedupSettings | None = None):
        self.cfg = cfg = cfg or DedupSettings()
        self.decon: Decontaminator | None = None
        # an item may become an RL prompt (judged on its prompt) or an SFT row (prompt + response)
        self.near = {form: NearDupIndex(cfg.near_dup_threshold, cfg.minhash_num_perm, cfg.minhash_bands)
                     for form in ("prompt", "sft")}
        self.rows = 0

    def set_eval(self, items: list[Item]) -> None:
        c = self.cfg
        self.decon = Decontaminator([ngram_tokens(it.prompt) for it in items], n=c.decontam_ngram,
                                    max_hits=c.decontam_max_hits, template_share=c.decontam_template_share,
                                    min_tokens=c.decontam_min_tokens,
                                    suites=[f"{it.domain}/{it.task}" for it in items], ids=[it.id for it in items])

    def admit(self, item: Item) -> bool:
        """True (and the item is remembered) unless the filter would flag it."""
        p_toks, r_toks = ngram_tokens(item.prompt), ngram_tokens(item.response)
        if self.decon is not None and (self.decon.hit(p_toks) or self.decon.hit(r_toks)):
            return False
        forms = {"prompt": p_toks, "sft": p_toks + r_toks}
        group = np.array([key_of(normalize(item.reference)) if item.reference else 0], np.uint64)
        ready = {}
        for form, toks in forms.items():
            if len(toks) < self.cfg.near_dup_min_tokens:
                continue
            index = self.near[form]
            index.prepare(signatures([shingles(toks, self.cfg.shingle_size)], self.cfg.minhash_num_perm), group)
            if index.match(0) is not None:
                for other in ready:
                    self.near[other].commit()       # nothing kept: resets the prepared batch
                index.commit()
                return False
            ready[form] = index
        for index in ready.values():
            index.keep(0, self.rows)
            index.commit()
        self.rows += 1
        return True
