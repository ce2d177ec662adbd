"""Name → object registries, so a new estimator or environment is one registered name."""

from __future__ import annotations

import inspect
from typing import Callable, Collection, Generic, Iterable, Iterator, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """A named table of components; unknown names raise a `KeyError` listing the known ones."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        def deco(obj: T) -> T:
            if name in self._items:
                raise ValueError(f"{self.kind} {name!r} is already registered")
            self._items[name] = obj
            return obj

        return deco

    def get(self, name: str) -> T:
        try:
            return self._items[name]
        except KeyError:
            known = ", ".join(sorted(self._items)) or "none"
            raise KeyError(f"unknown {self.kind} {name!r}; known: {known}") from None

    def names(self) -> list[str]:
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._items))


def unknown_options(fn: Callable, options: Iterable[str], keyword_only: bool = True,
                    exclude: Collection[str] = ()) -> tuple[list[str], list[str]]:
    """(the keys of `options` that `fn` does not accept, the names it does): what a registered
    component is checked against before a run starts. Accepted are its keyword-only parameters
    (every parameter with `keyword_only=False`) outside `exclude`; a `**kwargs` accepts all."""
    params = inspect.signature(fn).parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return [], []
    accepted = [n for n, p in params.items()
                if (p.kind is p.KEYWORD_ONLY or not keyword_only) and n not in exclude]
    return [k for k in options if k not in accepted], accepted
