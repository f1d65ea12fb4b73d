"""Per-unit gradients, clipping and the noisy sum: the DP-SGD step written out for units Opacus cannot see.

Opacus computes one gradient per row of the batch. Multi-clip DP-SGD needs one per *video* (the
mean over its K clips, Luo et al.), and MaskDP-SGD (paper 001, Algorithm 1) a clipped private
gradient beside an unclipped public one; both are written here with ``torch.func``:

    g_i   = ∇θ L_i(θ)                                  per unit, vmap over the batch (lines 6-7)
    ḡ_i   = g_i · min(1, C / ‖g_i‖₂)                   the flat clipping of Opacus (line 8)
    g     = (Σ_i ḡ_i + N(0, σ²C²·I) [+ Σ_i g_pu,i]) / (qN)   (lines 10-11)

The sum is divided by the *expected* batch size qN, as Opacus does, not by |B_t| as line 11
prints: the realised batch size depends on who was sampled, and the accounting of the
Poisson-subsampled Gaussian mechanism covers only the noisy sum.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.func import functional_call, grad_and_value, vmap

from tasks.core.dp_randomness import DpStream
from tasks.video_models.selective import trainable_parameters

Gradients = dict[str, torch.Tensor]
CLIP_EPSILON = 1e-6  # Opacus's guard in C / (‖g‖ + 1e-6)


def per_unit_gradients(
    module: nn.Module, inputs: torch.Tensor, labels: torch.Tensor
) -> tuple[Gradients, torch.Tensor]:
    """(∇θ, value) of each unit's mean cross-entropy over its clips: ``inputs`` (B, K, ...) → gradients (B, ...), losses (B,).

    K = 1 is DP-SGD's per-sample gradient; K > 1 is multi-clip's per-video gradient. The loss
    comes from the same forward pass, for the training history.
    """
    trainable = {
        name: parameter.detach() for name, parameter in trainable_parameters(module).items()
    }
    fixed = {
        name: tensor.detach()
        for name, tensor in [*module.named_parameters(), *module.named_buffers()]
        if name not in trainable
    }

    def unit_loss(weights: Gradients, clips: torch.Tensor, label: torch.Tensor) -> torch.Tensor:
        logits = functional_call(module, {**weights, **fixed}, (clips,))
        return nn.functional.cross_entropy(logits, label.expand(len(clips)))

    return vmap(grad_and_value(unit_loss), in_dims=(None, 0, 0), randomness="different")(
        trainable, inputs, labels
    )


def clip_and_sum(gradients: Gradients, max_norm: float) -> tuple[Gradients, torch.Tensor]:
    """(Σ_i g_i · min(1, C/‖g_i‖), the per-unit norms ‖g_i‖ over all trainable tensors)."""
    norms = torch.stack([g.flatten(1).pow(2).sum(1) for g in gradients.values()]).sum(0).sqrt()
    factors = (max_norm / (norms + CLIP_EPSILON)).clamp(max=1.0)
    return {name: torch.einsum("b,b...->...", factors, g) for name, g in gradients.items()}, norms


def summed_gradient(module: nn.Module, loss: Callable[[], torch.Tensor]) -> Gradients:
    """Σ over the batch of ∇θ of a loss with reduction ``sum`` (MaskDP's public term: no clipping, no noise)."""
    parameters = trainable_parameters(module)
    values = torch.autograd.grad(loss(), list(parameters.values()))
    return dict(zip(parameters, values))


def add_noise(
    summed: Gradients, noise_multiplier: float, max_norm: float, stream: DpStream
) -> Gradients:
    """Σ ḡ_i + N(0, (σC)²) per coordinate (σ = 0: no noise), drawn from ``stream`` on the CPU and moved."""
    if noise_multiplier == 0:
        return summed
    return {name: g + stream.normal(noise_multiplier * max_norm, g) for name, g in summed.items()}


def apply_gradient(module: nn.Module, total: Gradients, expected_batch: float) -> None:
    """Write (total / qN) into ``.grad`` of the trainable parameters, for any torch optimiser to step."""
    for name, parameter in trainable_parameters(module).items():
        parameter.grad = (total[name] / expected_batch).to(parameter.dtype)
