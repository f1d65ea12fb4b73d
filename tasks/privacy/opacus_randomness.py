"""Opacus with its DP randomness drawn from :class:`tasks.core.dp_randomness.DpStream`, not torch's generators.

Opacus draws its Gaussian noise (``DPOptimizer.add_noise``) and its Poisson batches
(``UniformWithReplacementSampler``) from torch generators; on the CPU that is MT19937, which keeps 32
bits of any seed, so an update's noise can be searched for and subtracted (issue 30). Opacus's own
fix, ``secure_mode``, needs torchcsprng, which is not installable here. So:

- :class:`StreamPrivacyEngine` is Opacus's ``PrivacyEngine`` (same model wrapping, optimiser
  classes, clipping, accountant hook) whose optimiser adds noise from a ``DpStream`` and whose
  Poisson loader is :class:`StreamPoissonSampler`;
- :class:`StreamPoissonSampler` also serves the DPDDP ranks (each its share of one global sample)
  and :class:`StreamShuffle` the federated clients' epochs.

Everything else is Opacus's: per-sample gradients, flat clipping, the scaling by the expected batch,
the accountant's history.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any

import torch
from opacus import PrivacyEngine
from opacus.optimizers.optimizer import DPOptimizer, _check_processed_flag, _mark_as_processed
from torch.utils.data import DataLoader, Sampler, TensorDataset, default_collate

from tasks.core.dp_randomness import DpStream


class StreamPoissonSampler(Sampler[list[int]]):
    """Exactly ``steps`` batches, each holding every owned index independently with probability ``rate``.

    ``owned`` (default: all ``total`` indices) is a DPDDP rank's share, rank, rank + N, …: with each rank
    drawing its own share from its own stream, every index is in a step's global batch independently
    with probability q — the sampling the accountant assumes. Empty batches are kept (Opacus's
    distributed sampler skips a rank's empty draw, so the ranks' steps would pair up wrongly).
    """

    def __init__(
        self,
        total: int,
        rate: float,
        steps: int,
        stream: DpStream,
        owned: torch.Tensor | None = None,
    ) -> None:
        self.owned = torch.arange(total) if owned is None else owned
        self.rate, self.steps, self.stream = rate, steps, stream

    def __len__(self) -> int:
        return self.steps

    def __iter__(self) -> Iterator[list[int]]:
        for _ in range(self.steps):
            yield self.owned[self.stream.poisson_sample(len(self.owned), self.rate)].tolist()


class StreamShuffle(Sampler[int]):
    """A fresh random order of ``count`` items every epoch, drawn from ``stream``."""

    def __init__(self, count: int, stream: DpStream) -> None:
        self.count, self.stream = count, stream

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[int]:
        return iter(self.stream.permutation(self.count).tolist())


def collate_or_empty(dataset: TensorDataset) -> Callable[[list[Any]], list[torch.Tensor]]:
    """Default collation, or (0, ...) tensors of the dataset's shapes for an empty Poisson draw."""

    def collate(batch: list[Any]) -> list[torch.Tensor]:
        if batch:
            return default_collate(batch)
        return [tensor[:0] for tensor in dataset.tensors]

    return collate


class _StreamNoise:
    """``add_noise`` of a DPOptimizer class, N(0, σ²C²) per coordinate from ``noise_stream``."""

    noise_stream: DpStream

    def add_noise(self) -> None:
        # DistributedDPOptimizer: the noise is added once, on rank 0
        if getattr(self, "rank", 0) != 0:
            super().add_noise()  # type: ignore[misc]
            return
        for parameter in self.params:  # type: ignore[attr-defined]
            _check_processed_flag(parameter.summed_grad)
            noise = self.noise_stream.normal(
                self.noise_multiplier * self.max_grad_norm,  # type: ignore[attr-defined]
                parameter.summed_grad,
            )
            parameter.grad = (parameter.summed_grad + noise).view_as(parameter)
            _mark_as_processed(parameter.summed_grad)


@functools.cache
def stream_noise_class(base: type[DPOptimizer]) -> type[DPOptimizer]:
    """``base`` (the class Opacus picks for the clipping, distribution and grad-sample mode) with stream noise."""
    return type(f"StreamNoise{base.__name__}", (_StreamNoise, base), {})


class StreamPrivacyEngine(PrivacyEngine):
    """Opacus's ``PrivacyEngine`` whose noise comes from ``noise`` and whose Poisson batches come from ``sampling``.

    ``steps_per_epoch`` (q = 1 / steps) and ``expected_batch_size`` (the normaliser of the noised sum), where given,
    replace what Opacus derives from the dataset's length — ⌈N / B⌉ and int(N / ⌈N / B⌉) — so that neither follows
    the private N.
    """

    def __init__(
        self,
        *,
        noise: DpStream,
        sampling: DpStream | None = None,
        accountant: str = "prv",
        steps_per_epoch: int | None = None,
        expected_batch_size: float | None = None,
    ) -> None:
        super().__init__(accountant=accountant)
        self.noise, self.sampling = noise, sampling
        self.steps_per_epoch, self.expected_batch_size = steps_per_epoch, expected_batch_size

    def _prepare_optimizer(self, **kwargs: Any) -> DPOptimizer:
        """Opacus's optimiser for these settings, its class extended with stream noise (it adds a method, no state)."""
        if kwargs.get("noise_generator") is not None:
            raise ValueError(
                "StreamPrivacyEngine draws its noise from its DpStream: pass no noise_generator"
            )
        # Opacus's is per process: the ranks' sums are averaged
        if self.expected_batch_size is not None:
            world = torch.distributed.get_world_size() if kwargs.get("distributed") else 1
            kwargs["expected_batch_size"] = self.expected_batch_size / world
        private = super()._prepare_optimizer(**kwargs)
        private.__class__ = stream_noise_class(type(private))
        private.noise_stream = self.noise
        return private

    def _prepare_data_loader(
        self,
        data_loader: DataLoader,
        *,
        poisson_sampling: bool,
        distributed: bool,
        batch_first: bool = True,
        rand_on_empty: bool = False,
    ) -> DataLoader:
        if self.dataset is None:
            self.dataset = data_loader.dataset
        if not poisson_sampling:
            return data_loader
        if (
            distributed
            or self.sampling is None
            or not isinstance(data_loader.dataset, TensorDataset)
        ):
            raise ValueError(
                "StreamPrivacyEngine samples a TensorDataset in one process from its sampling stream; "
                "DPDDP ranks bring their own StreamPoissonSampler (poisson_sampling=False)"
            )
        steps = self.steps_per_epoch or len(data_loader)
        sampler = StreamPoissonSampler(len(data_loader.dataset), 1.0 / steps, steps, self.sampling)
        return DataLoader(
            data_loader.dataset,
            batch_sampler=sampler,
            collate_fn=collate_or_empty(data_loader.dataset),
            pin_memory=data_loader.pin_memory,
        )
