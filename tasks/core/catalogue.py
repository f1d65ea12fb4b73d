"""Catalogues: methods that share an interface, found by the params value that names them (one entry each).

>>> SHAPES = Catalogue("shape")
>>> @SHAPES.entry("square")
... def square(side: float) -> float:
...     return side * side
>>> SHAPES["square"](3.0)
9.0
>>> sorted(SHAPES)
['square']
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from tasks.core.errors import PrivharError

F = TypeVar("F", bound=Callable)


class Catalogue(Generic[F]):
    """A name -> function table filled by a decorator."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, F] = {}

    def entry(self, name: str) -> Callable[[F], F]:
        def add(function: F) -> F:
            if name in self._entries:
                raise ValueError(f"{self.kind} {name!r} is in the catalogue twice")
            self._entries[name] = function
            return function

        return add

    def __getitem__(self, name: str) -> F:
        if name not in self._entries:
            raise PrivharError(
                f"unknown {self.kind} {name!r}; known: {', '.join(sorted(self._entries))}"
            )
        return self._entries[name]

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)
