"""For meta-path finders that act on another finder's module rather than find modules themselves."""
from __future__ import annotations

import sys


def spec_from_other_finders(me, name: str, path=None, target=None):
    """The spec the other finders on ``sys.meta_path`` (all but ``me``) give ``name``; None when none does."""
    for finder in sys.meta_path:
        if finder is me or not hasattr(finder, "find_spec"):
            continue
        spec = finder.find_spec(name, path, target)
        if spec is not None:
            return spec
    return None
