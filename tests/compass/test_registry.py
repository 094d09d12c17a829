from __future__ import annotations

import pytest

from compass.registry import Registry


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


def test_loaded_imports_the_registering_modules_once(monkeypatch):
    import importlib
    from compass.registry import Registry
    calls = []
    monkeypatch.setattr(importlib, "import_module", lambda name: calls.append(name))
    reg = Registry("thing", modules=("pkg.a", "pkg.b"))
    assert reg.loaded() is reg and reg.loaded() is reg
    assert calls == ["pkg.a", "pkg.b"]
