"""A client's round (paper 003 Algorithm 1 lines 5-14): DP-SGD with Opacus on its own shard, θ_t only.

The client copies the broadcast trainable tensors into its module (the frozen ones it already
holds: the public model), shuffles its N_k videos every local epoch into batches of
B_k = min(B, N_k) (top-level sampling, line 7: each video once per epoch), and steps Opacus's
DP optimiser: per-sample gradients of θ_t, flat clipping to C, N(0, σ²C²) on the batch sum,
division by B_k (eq. 9; Opacus's convention for fixed-size batches — a last, shorter batch is
divided by B_k too), SGD with momentum (reset each round). It returns the masked update
Δ_k = Mask_θt(w_k − w_t) (eq. 12): the trainable tensors only, so the frozen ones cannot change.
"""

from __future__ import annotations

import copy
import io
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from tasks.core.dp_randomness import DpStream
from tasks.privacy.opacus_randomness import StreamPrivacyEngine, StreamShuffle
from tasks.video_models.selective import (
    require_sample_independence,
    trainable_parameters,
    without_dropout,
)

Tensors = dict[str, torch.Tensor]


@dataclass(frozen=True)
class LocalRecipe:
    local_epochs: int  # E
    batch_size: int  # B
    learning_rate: float
    momentum: float
    max_grad_norm: float  # C
    noise_multiplier: float  # σ (0: no noise)
    grad_sample_mode: str = "hooks"  # Opacus per-sample gradients: hooks | ew | functorch
    device: str = "cpu"  # where the client trains (base.device, resolved); updates go on the wire from the CPU


@dataclass
class Shard:
    """One client's data: inputs of the trainable module (clips, or frozen-prefix activations) and labels."""

    inputs: torch.Tensor
    labels: torch.Tensor


@dataclass
class ClientResult:
    update: Tensors  # Δ_k, trainable tensors only
    count: int  # n_k
    steps: int  # τ_k, local optimiser steps
    loss: float  # mean training loss over the round


def trainable_state(module: nn.Module) -> Tensors:
    """θ_t of ``module``: detached copies of the tensors that require gradients."""
    return {
        name: parameter.detach().clone() for name, parameter in trainable_parameters(module).items()
    }


def load_trainable(module: nn.Module, state: Tensors) -> None:
    with torch.no_grad():
        for name, parameter in module.named_parameters():
            if name in state:
                parameter.copy_(state[name])


def local_steps(count: int, recipe: LocalRecipe) -> int:
    """τ_k = E · ⌈N_k / B_k⌉."""
    return recipe.local_epochs * math.ceil(count / min(recipe.batch_size, count))


def client_stream(seed: int, stream: int) -> DpStream:
    """The client's own randomness: 256 bits of OS entropy when ``seed`` < 0 (secure: not even the server
    knows it), else seeded from ``seed`` + ``stream`` (reproducible, NOT private)."""
    if seed < 0:
        return DpStream.secret()
    return DpStream.seeded(seed + stream)


def client_round(
    module: nn.Module,
    broadcast: Tensors,
    shard: Shard,
    recipe: LocalRecipe,
    seed: int,
    on_step: Callable[[nn.Module], None] | None = None,
) -> ClientResult:
    """Train a copy of ``module`` from ``broadcast`` on ``shard``; return Δ_k.

    ``seed`` fixes the shuffles and the noise; a negative seed draws both from the client's OS entropy. ``on_step``
    sees the local copy after every optimiser step (the audit's white-box view).
    """
    device = torch.device(recipe.device)
    local = copy.deepcopy(module).to(device)
    load_trainable(local, broadcast)
    require_sample_independence(local)
    without_dropout(local)
    count = len(shard.labels)
    batch = min(recipe.batch_size, count)
    optimiser = torch.optim.SGD(
        list(trainable_parameters(local).values()),
        lr=recipe.learning_rate,
        momentum=recipe.momentum,
    )
    loader = DataLoader(
        TensorDataset(shard.inputs.cpu(), shard.labels.cpu()),
        batch_size=batch,
        sampler=StreamShuffle(count, client_stream(seed, 0)),
        pin_memory=device.type == "cuda",
    )
    # its accountant assumes Poisson sampling: ε comes from tasks.privacy.federated_accounting
    engine = StreamPrivacyEngine(noise=client_stream(seed, 1))
    private, optimiser, loader = engine.make_private(
        module=local,
        optimizer=optimiser,
        data_loader=loader,
        noise_multiplier=recipe.noise_multiplier,
        max_grad_norm=recipe.max_grad_norm,
        poisson_sampling=False,
        grad_sample_mode=recipe.grad_sample_mode,
    )
    loss_sum, seen = 0.0, 0
    try:
        for _ in range(recipe.local_epochs):
            for inputs, labels in loader:
                inputs, labels = (
                    inputs.to(device, non_blocking=True),
                    labels.to(device, non_blocking=True),
                )
                optimiser.zero_grad(set_to_none=True)
                loss = F.cross_entropy(private(inputs), labels)
                loss.backward()
                optimiser.step()
                if on_step is not None:
                    on_step(local)
                loss_sum, seen = loss_sum + loss.detach().item() * len(labels), seen + len(labels)
    finally:
        private.remove_hooks()
    trained = {name: tensor.cpu() for name, tensor in trainable_state(local).items()}
    update = {name: trained[name] - broadcast[name].cpu() for name in broadcast}
    return ClientResult(update, count, local_steps(count, recipe), loss_sum / max(seen, 1))


def serialized_bytes(tensors: Tensors) -> int:
    """Bytes of ``torch.save(tensors)``: what a client puts on the wire for this update."""
    buffer = io.BytesIO()
    torch.save(tensors, buffer)
    return buffer.getbuffer().nbytes
