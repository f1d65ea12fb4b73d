"""Where DP randomness comes from: the operating system's CSPRNG by default, a seed only when asked.

Noise, randomized-response coins and privacy sampling are what a DP guarantee rests on: anyone who
can regenerate them subtracts the noise (released LDP codes invert to the true codes, Video-DPRP's
P̃ − M = XR, a DP-SGD run replays with and without a target video). So ``privacy.randomness``:

- ``secure`` (default): each stream is keyed from ``os.urandom`` at the moment of the release and
  never written anywhere; the output differs from run to run. Every key holds at least 128 bits
  (:data:`MIN_KEY_BITS`): a :class:`DpStream` 256 (numpy's PCG64DXSM under a SeedSequence), a
  :meth:`DpRandomness.seed` 128 (a Philox key). torch's CPU generator is never used for DP draws:
  its MT19937 keeps 32 bits of any seed, and 2^32 seeds are searched in minutes (issue 30). Where
  Opacus draws noise and Poisson samples itself, :mod:`tasks.privacy.opacus_randomness` replaces them;
  its own ``secure_mode`` needs torchcsprng, which no registry here serves for torch 2.13.
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
>>> secure.stream("x").key_bits >= MIN_KEY_BITS and seeded.stream("x").private is False
True
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

from tasks.core.item_randomness import derive_seed

Mode = Literal["secure", "seeded"]
NOT_PRIVATE = "not private: randomness reproducible from params"
SECURE = "secret: OS entropy (os.urandom), never stored"
MIN_KEY_BITS = 128  # the least secret key any DP draw may come from
STREAM_KEY_BITS = 256  # OS entropy behind one secret DpStream
SEED_KEY_BITS = 128  # a secret seed: the size of a Philox key (Video-DPRP's R and noise)


class DpStream:
    """One stream of DP draws (noise, Poisson samples, shuffles) as torch tensors, from numpy's PCG64DXSM.

    Secret streams start from :data:`STREAM_KEY_BITS` of OS entropy; seeded ones from a 63-bit seed
    derived from params (``key_bits`` 63, ``private`` False). The draws are made on the CPU and moved
    to the tensor they are added to, so a GPU never holds a generator whose state is a short seed.
    Children (:meth:`spawn`) keep the parent's entropy: one per DPDDP rank or per client.
    """

    def __init__(self, sequence: np.random.SeedSequence, *, private: bool, key_bits: int) -> None:
        self.sequence, self.private, self.key_bits = sequence, private, key_bits
        self._rng = np.random.Generator(np.random.PCG64DXSM(sequence))

    @classmethod
    def secret(cls) -> DpStream:
        """A stream keyed with fresh OS entropy, never stored."""
        entropy = int.from_bytes(os.urandom(STREAM_KEY_BITS // 8), "little")
        return cls(np.random.SeedSequence(entropy), private=True, key_bits=STREAM_KEY_BITS)

    @classmethod
    def seeded(cls, seed: int) -> DpStream:
        """A reproducible stream (tests, reproduced tables): NOT private."""
        return cls(
            np.random.SeedSequence(seed), private=False, key_bits=max(int(seed).bit_length(), 1)
        )

    @property
    def key(self) -> tuple[object, ...]:
        """What tells two streams apart: the entropy and the spawn path (children share their parent's entropy)."""
        return (self.sequence.entropy, *self.sequence.spawn_key)

    def spawn(self, count: int) -> list[DpStream]:
        """``count`` independent child streams with the parent's key."""
        return [
            DpStream(child, private=self.private, key_bits=self.key_bits)
            for child in self.sequence.spawn(count)
        ]

    def poisson_sample(self, count: int, rate: float) -> torch.Tensor:
        """Indices of ``count`` units, each in independently with probability ``rate`` (int64, CPU)."""
        return torch.from_numpy(np.flatnonzero(self._rng.random(count) < rate))

    def permutation(self, count: int) -> torch.Tensor:
        """A uniformly random order of ``count`` items (int64, CPU)."""
        return torch.from_numpy(self._rng.permutation(count))

    def normal(self, std: float, like: torch.Tensor) -> torch.Tensor:
        """N(0, std²) of ``like``'s shape, dtype and device (zeros for std = 0)."""
        if std == 0:
            return torch.zeros_like(like)
        values = self._rng.standard_normal(
            tuple(like.shape), dtype=np.float32 if like.dtype != torch.float64 else np.float64
        )
        return torch.from_numpy(values).mul_(std).to(device=like.device, dtype=like.dtype)


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
        """A Philox key: 128 bits of fresh OS entropy (``secure``), or 63 derived from (base.seed, keys) (``seeded``)."""
        if self.private:
            return int.from_bytes(os.urandom(SEED_KEY_BITS // 8), "little")
        return derive_seed(self.base_seed, *keys)

    def stream(self, *keys: object) -> DpStream:
        """A :class:`DpStream`: secret (256 bits of OS entropy) or derived from (base.seed, keys)."""
        if self.private:
            return DpStream.secret()
        return DpStream.seeded(derive_seed(self.base_seed, *keys))

    def numpy(self, *keys: object) -> np.random.Generator:
        """A numpy Generator from :meth:`seed`: 128 bits of OS entropy in ``secure`` mode."""
        return np.random.default_rng(self.seed(*keys))
