"""An environment variable set for a block and restored after it, for the processes the block starts."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator


@contextlib.contextmanager
def exported(name: str, value: str) -> Iterator[None]:
    """``os.environ[name] = value`` inside the block; its previous value (or its absence) after.

    >>> with exported("PRIVHAR_DOCTEST", "1"):
    ...     os.environ["PRIVHAR_DOCTEST"]
    '1'
    >>> "PRIVHAR_DOCTEST" in os.environ
    False
    """
    previous = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = previous
