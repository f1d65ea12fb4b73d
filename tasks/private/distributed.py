"""DP-SGD across processes: Opacus's ``DPDDP`` under ``torch.distributed`` (gloo on the CPU, NCCL on GPUs).

``private.nproc`` (or ``privhar stage train-private --nproc N``) > 1 trains each ``dp_sgd`` model in N
processes, each holding the whole training set; what makes it the same mechanism as one process:

- **Poisson sampling is global.** :func:`rank_sampler` gives rank r the indices r, r + N, …
  and includes each with probability q from that rank's own :class:`~tasks.core.dp_randomness.DpStream`
  (each rank its own child of one secret stream, or of a seeded one), so every video is in a step's
  batch independently with probability q — the sampling the accountant assumes, not N samplings.
  (Not Opacus's distributed sampler: it skips a rank's empty draw, see
  :class:`~tasks.privacy.opacus_randomness.StreamPoissonSampler`.)
- **The noise is added once.** ``DistributedDPOptimizer`` adds N(0, σ²C²) on rank 0 only, from the
  noise stream (:class:`~tasks.privacy.opacus_randomness.StreamPrivacyEngine`); the
  other ranks contribute their clipped sums, and the all-reduce makes
  (Σ_r Σ_{i∈B_r} ḡ_i + noise) / (qN) on every rank: the single-process update.
- **ε is the same** as one process for the same (q, σ, steps): the accountant sees one mechanism.

The workers are started with ``spawn`` (a fork after torch's thread pool has started is unsafe);
rank 0 returns the trained weights, the history and Opacus's own ε to the caller.
"""

from __future__ import annotations

import copy
import os
import socket
import tempfile
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from tasks.core.dp_randomness import DpStream
from tasks.core.errors import PrivharError
from tasks.privacy.opacus_randomness import (
    StreamPoissonSampler,
    StreamPrivacyEngine,
    collate_or_empty,
)


def free_port() -> int:
    """A TCP port nobody listens on now, for the process group's rendezvous on this host."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def backend_for(device: torch.device) -> str:
    """NCCL between GPUs, gloo between CPU processes."""
    return "nccl" if device.type == "cuda" else "gloo"


def rank_sampler(
    total: int, rank: int, world: int, steps: int, stream: DpStream
) -> StreamPoissonSampler:
    """This rank's share of a global Poisson sample: videos rank, rank + N, … each in with probability q = 1/steps,
    exactly ``steps`` batches an epoch, empty ones included."""
    return StreamPoissonSampler(
        total, 1.0 / steps, steps, stream, owned=torch.arange(rank, total, world)
    )


def _private_rank(
    job: dict[str, Any], module: nn.Module, rank: int, world: int
) -> tuple[StreamPrivacyEngine, Any, Any, DataLoader]:
    """This rank's share of the Poisson sample and Opacus's DPDDP wrapping (noise added on rank 0 only)."""
    from opacus.distributed import DifferentiallyPrivateDistributedDataParallel as DPDDP

    dataset = TensorDataset(job["inputs"], job["labels"])
    # q = 1 / steps and the normaliser from the public schedule (methods.schedule), not from len(dataset)
    sampler = rank_sampler(len(dataset), rank, world, job["steps_per_epoch"], job["sampling"][rank])
    loader = DataLoader(dataset, batch_sampler=sampler, collate_fn=collate_or_empty(dataset))
    engine = StreamPrivacyEngine(
        noise=job["noise"],
        accountant=job["accountant"],
        expected_batch_size=job["expected_batch_size"],
    )
    optimiser = torch.optim.SGD(
        [p for p in module.parameters() if p.requires_grad],
        lr=job["learning_rate"],
        momentum=job["momentum"],
    )
    private, optimiser, private_loader = engine.make_private(
        module=DPDDP(module),
        optimizer=optimiser,
        data_loader=loader,
        noise_multiplier=job["noise_multiplier"],
        max_grad_norm=job["max_grad_norm"],
        poisson_sampling=False,  # the sampler is Poisson
        grad_sample_mode=job["grad_sample_mode"],
    )
    return engine, private, optimiser, private_loader


def _worker(rank: int, world: int, port: int, job: dict[str, Any], result: str) -> None:
    """One rank: join the group, wrap the module in DPDDP, run Opacus's DP-SGD epochs, rank 0 saves the result."""
    from tasks.private.opacus_loop import opacus_epoch

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    device = (
        torch.device(job["device"])
        if job["device"] == "cpu"
        else torch.device("cuda", rank % torch.cuda.device_count())
    )
    torch.set_num_threads(max(1, job["threads"] // world))
    dist.init_process_group(backend_for(device), rank=rank, world_size=world)
    try:
        # the spawned ranks receive the module's tensors in shared memory: each needs weights of its own,
        # or every rank's optimiser steps the same storage (N steps where the mechanism takes one)
        module: nn.Module = copy.deepcopy(job["module"]).to(device)
        engine, private, optimiser, private_loader = _private_rank(job, module, rank, world)
        history = []
        for epoch in range(1, job["epochs"] + 1):
            loss_sum, seen, _ = opacus_epoch(
                private, module, optimiser, private_loader, job["physical_batch_size"], device
            )
            totals = torch.tensor([loss_sum, float(seen)], dtype=torch.float64, device=device)
            dist.all_reduce(totals)
            history.append(
                {
                    "epoch": epoch,
                    "loss": float(totals[0] / max(totals[1], 1)),
                    "sampled": int(totals[1]),
                }
            )
        private.remove_hooks()
        if rank == 0:
            state = {name: tensor.detach().cpu() for name, tensor in module.state_dict().items()}
            torch.save(
                {
                    "state_dict": state,
                    "history": history,
                    "noise_multiplier": float(optimiser.noise_multiplier),
                    "history_accountant": [tuple(step) for step in engine.accountant.history],
                    "mechanism": engine.accountant.mechanism(),
                },
                result,
            )
    finally:
        dist.destroy_process_group()


def _check_processes(nproc: int, sampling: list[DpStream], device: torch.device) -> None:
    if nproc < 2:
        raise PrivharError(
            f"private.nproc = {nproc}: the process group needs 2 or more processes (1 runs in this one)"
        )
    if len(sampling) != nproc or len({stream.key for stream in sampling}) != nproc:
        raise PrivharError(
            f"private.nproc = {nproc}: expected {nproc} distinct sampling streams, one per process"
        )
    if device.type == "cuda" and torch.cuda.device_count() < nproc:
        raise PrivharError(
            f"private.nproc = {nproc}: this machine has {torch.cuda.device_count()} CUDA GPU(s), one per process"
        )


def train_dp_sgd_processes(
    module: nn.Module,
    inputs: torch.Tensor,
    labels: torch.Tensor,
    *,
    nproc: int,
    noise_multiplier: float,
    physical_batch_size: int,
    epochs: int,
    learning_rate: float,
    momentum: float,
    max_grad_norm: float,
    grad_sample_mode: str,
    accountant: str,
    noise: DpStream,
    sampling: list[DpStream],
    steps_per_epoch: int,
    expected_batch_size: float,
    device: torch.device = torch.device("cpu"),
) -> dict[str, Any]:
    """Opacus DP-SGD of ``module`` in ``nproc`` processes; ``module`` gets the trained weights.

    Returns rank 0's record: ``history``, ``noise_multiplier``, Opacus's accountant history and mechanism.
    ``sampling`` (one stream per rank, distinct) draw each rank's Poisson sample; ``noise`` rank 0's noise.
    ``steps_per_epoch`` (q = 1 / steps) and ``expected_batch_size`` (the normaliser) are the public schedule's.
    The streams travel to the spawned ranks pickled, in memory, never written.
    """
    _check_processes(nproc, sampling, device)
    job = {
        "module": module.cpu(),
        "inputs": inputs.cpu(),
        "labels": labels.cpu(),
        "physical_batch_size": physical_batch_size,
        "epochs": epochs,
        "learning_rate": learning_rate,
        "momentum": momentum,
        "max_grad_norm": max_grad_norm,
        "grad_sample_mode": grad_sample_mode,
        "accountant": accountant,
        "noise_multiplier": noise_multiplier,
        "noise": noise,
        "sampling": sampling,
        "device": device.type,
        "threads": torch.get_num_threads(),
        "steps_per_epoch": steps_per_epoch,
        "expected_batch_size": expected_batch_size,
    }
    with tempfile.TemporaryDirectory(prefix="privhar-dpddp-") as folder:
        result = str(Path(folder) / "rank0.pt")
        torch.multiprocessing.start_processes(
            _worker,
            args=(nproc, free_port(), job, result),
            nprocs=nproc,
            join=True,
            start_method="spawn",
        )
        record = torch.load(result, weights_only=False)
    module.load_state_dict(record.pop("state_dict"))
    return record
