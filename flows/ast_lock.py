"""One ``ast.parse`` at a time in this process, while the flow runs stages and shards on threads.

CPython 3.11 keeps the depth counter of its AST constructor in per-interpreter state, not per
thread (cpython gh-106905): when two threads build ASTs at once and the GIL switches between
them (a garbage-collected finaliser is enough), one of them fails with ``SystemError: AST
constructor recursion depth mismatch``. The shards parse ASTs without asking for it: every
``numpy.load`` reads the ``.npy`` header with ``ast.literal_eval``, first imports of torch,
torchvision and matplotlib parse sources and signatures. Seen here failing an anonymize shard
of the flow. Every one of those goes through ``ast.parse``, so a lock around it is enough.
"""

from __future__ import annotations

import ast
import threading
from typing import Any

_LOCK = threading.RLock()  # re-entrant: a finaliser run during a parse may parse again
_unguarded = ast.parse


def _serial_parse(*args: Any, **kwargs: Any) -> Any:
    with _LOCK:
        return _unguarded(*args, **kwargs)


def serialise_ast_parse() -> None:
    """Make ``ast.parse`` (and ``ast.literal_eval``, which calls it) hold one process-wide lock."""
    ast.parse = _serial_parse
