"""Functions registered by name (advantage estimators, policy losses, ...): one name, one function."""
from __future__ import annotations

import importlib
from typing import Callable, TypeVar

F = TypeVar("F", bound=Callable)


class Registry(dict):
    """A dict of name -> function with a decorator to fill it and errors that list the known names."""

    def __init__(self, what: str, modules: tuple[str, ...] = ()):
        super().__init__()
        self.what = what
        self.modules = modules      # modules whose import registers entries (see ``loaded``)
        self._imported = False

    def loaded(self) -> "Registry":
        """The registry after importing ``modules`` (once): entries that live in their own files."""
        if not self._imported:
            for mod in self.modules:
                importlib.import_module(mod)
            self._imported = True
        return self

    def register(self, name: str) -> Callable[[F], F]:
        """Decorator: ``@REGISTRY.register("grpo")`` makes the function known as ``name``."""
        def deco(fn: F) -> F:
            if name in self:
                raise ValueError(f"{self.what} '{name}' is registered twice")
            self[name] = fn
            return fn
        return deco

    def lookup_in_module(self, name: str, modules: dict[str, str]) -> Callable:
        """``lookup(name)`` after importing only ``modules[name]``, the module that registers ``name``
        (entries that live in their own, possibly heavy, module: e.g. the Megatron trainer). An unknown
        name lists every name ``modules`` offers."""
        if name not in self and name in modules:
            importlib.import_module(modules[name])
        if name not in self:
            known = sorted(set(self) | set(modules))
            raise ValueError(f"unknown {self.what} '{name}' (known: {', '.join(known)})")
        return self[name]

    def lookup(self, name: str) -> Callable:
        try:
            return self[name]
        except KeyError:
            raise ValueError(f"unknown {self.what} '{name}' (known: {', '.join(sorted(self))})") from None
