"""Where DP randomness comes from: the operating system's CSPRNG by default, a seed only when asked.

Noise, randomized-response coins and privacy sampling are what a DP guarantee rests on: anyone who
can regenerate them subtracts the noise (released LDP codes invert to the true codes, Video-DPRP's
P̃ − M = XR, a DP-SGD run replays with and without a target video). So ``privacy.randomness``:

- ``secure`` (default): each draw is seeded from ``os.urandom`` (128 bits for numpy, 64 for torch)
  at the moment of the release and never written anywhere; the output differs from run to run.
- ``seeded``: derived from (``base.seed``, keys), as every non-DP stage is — for tests and for
  reproducing a table. Every release made so is labelled :data:`NOT_PRIVATE`.

Randomness that is not part of a DP mechanism (synthetic data, initialisation, augmentation, the
public projection R of a shared Video-DPRP) stays derived from ``base.seed``.

>>> seeded = DpRandomness("seeded", 7)
>>> seeded.seed("x") == seeded.seed("x") and seeded.private is False
True
>>> secure = DpRandomness("secure", 7)
>>> secure.seed("x") != secure.seed("x") and secure.private
True
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

from tasks.core.seeding import derive_seed

Mode = Literal["secure", "seeded"]
NOT_PRIVATE = "not private: randomness reproducible from params"
SECURE = "secret: OS entropy (os.urandom), never stored"


@dataclass(frozen=True)
class DpRandomness:
    """The source of one stage's DP randomness (``privacy.randomness``, ``base.seed``)."""

    mode: Mode
    base_seed: int

    @property
    def private(self) -> bool:
        """Whether an attacker holding the repository cannot replay the draws."""
        return self.mode == "secure"

    @property
    def label(self) -> str:
        """What the ledger, registry tags, CLI JSON and report say about the randomness."""
        return SECURE if self.private else NOT_PRIVATE

    def seed(self, *keys: object) -> int:
        """A 63-bit seed: fresh OS entropy (``secure``) or derived from (base.seed, keys) (``seeded``)."""
        if self.private:
            return int.from_bytes(os.urandom(8), "little") >> 1
        return derive_seed(self.base_seed, *keys)

    def numpy(self, *keys: object) -> np.random.Generator:
        """A numpy Generator; in ``secure`` mode seeded with 128 bits of OS entropy."""
        if self.private:
            return np.random.default_rng(int.from_bytes(os.urandom(16), "little"))
        return np.random.default_rng(derive_seed(self.base_seed, *keys))

    def torch(self, *keys: object) -> torch.Generator:
        """A torch Generator (CPU); in ``secure`` mode seeded with 64 bits of OS entropy."""
        if self.private:
            return torch.Generator().manual_seed(int.from_bytes(os.urandom(8), "little"))
        return torch.Generator().manual_seed(derive_seed(self.base_seed, *keys))
