from __future__ import annotations

import pytest

from stages.common.named_registry import Registry


def test_register_lookup_and_errors():
    reg = Registry("policy loss")

    @reg.register("a")
    def a():
        return 1
    assert reg.lookup("a") is a and reg.lookup("a")() == 1
    with pytest.raises(ValueError, match="policy loss 'a' is registered twice"):
        reg.register("a")(lambda: 2)
    with pytest.raises(ValueError, match=r"unknown policy loss 'b' \(known: a\)"):
        reg.lookup("b")
