"""Functions registered by name (advantage estimators, policy losses, ...): one name, one function."""
from __future__ import annotations

from typing import Callable, TypeVar

F = TypeVar("F", bound=Callable)


class Registry(dict):
    """A dict of name -> function with a decorator to fill it and errors that list the known names."""

    def __init__(self, what: str):
        super().__init__()
        self.what = what

    def register(self, name: str) -> Callable[[F], F]:
        """Decorator: ``@REGISTRY.register("grpo")`` makes the function known as ``name``."""
        def deco(fn: F) -> F:
            if name in self:
                raise ValueError(f"{self.what} '{name}' is registered twice")
            self[name] = fn
            return fn
        return deco

    def lookup(self, name: str) -> Callable:
        try:
            return self[name]
        except KeyError:
            raise ValueError(f"unknown {self.what} '{name}' (known: {', '.join(sorted(self))})") from None
