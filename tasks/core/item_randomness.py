"""Per-item randomness derived from (base.seed, keys), so stages can be resumed or sharded."""

from __future__ import annotations

import hashlib

import numpy as np


def derive_seed(seed: int, *keys: object) -> int:
    """A 63-bit seed that depends only on ``seed`` and the string forms of ``keys``.

    >>> derive_seed(0, "video", "v001") == derive_seed(0, "video", "v001")
    True
    >>> derive_seed(0, "a") != derive_seed(1, "a")
    True
    """
    text = "\x1f".join([str(seed), *map(str, keys)])
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little") >> 1


def rng_for(seed: int, *keys: object) -> np.random.Generator:
    """A numpy Generator for one item (one video, one identity, one scene ...)."""
    return np.random.default_rng(derive_seed(seed, *keys))
