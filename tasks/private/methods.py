"""The private training loops: DP-SGD (Opacus), multi-clip DP-SGD and MaskDP-SGD.

All three share the recipe (:class:`Recipe`): Poisson sampling with q = 1 / ⌈N / B⌉ (Opacus's
``1 / len(data_loader)``), ⌈N / B⌉ steps per epoch, flat clipping to C, Gaussian noise σC on the
sum, division by the expected batch qN, plain SGD with momentum. σ is calibrated once for the
target ε over all steps (:func:`tasks.private.accounting.calibrate`), so the three methods at one
ε and the same recipe add the same noise. No augmentation and no dropout while training
privately (paper 001 §5.3: the noise regularises).

- ``dp_sgd``: Opacus ``PrivacyEngine.make_private_with_epsilon`` and ``BatchMemoryManager``
  (physical batches of ``physical_batch_size`` inside the Poisson-sampled logical batch);
  per-sample gradients by ``private.grad_sample_mode``: ``ew`` (PyTorch's ExpandedWeights, the
  default: on this 3-D CNN 1.9-2.5× a non-private step, against 3.9-4.7× for Opacus's ``hooks``,
  whose Conv3d unfolding is mostly copies; the three agree to 1e-6, tested).
- ``multiclip`` (Luo et al., cited in paper 000): the unit is the video; its gradient is the mean
  over its K clips, clipped and noised once — K clips cost no more privacy than one.
- ``maskdp`` (paper 001, Algorithm 1): the private-token view's gradient is clipped and noised,
  the public-token view's is added unclipped and noise-free (lines 6-11).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from opacus import PrivacyEngine
from opacus.utils.batch_memory_manager import BatchMemoryManager
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from tasks.core.errors import PrivharError
from tasks.core.models import has_batch_norm
from tasks.private.accounting import SgdPrivacy, calibrate
from tasks.private.gradients import add_noise, apply_gradient, clip_and_sum, per_unit_gradients, summed_gradient, trainable_parameters


@dataclass(frozen=True)
class Recipe:
    epochs: int
    batch_size: int  # expected logical batch B: q = 1 / ceil(N / B)
    physical_batch_size: int  # rows per forward/backward pass (memory), any logical batch
    learning_rate: float
    momentum: float
    max_grad_norm: float  # C
    delta: float
    accountant: str
    grad_sample_mode: str = "ew"  # Opacus per-sample gradients (dp_sgd): ew (ExpandedWeights) | hooks | functorch


@dataclass
class PrivateData:
    """What one method trains on: ``units`` (N, K, ...) private views, labels, and MaskDP's public views.

    For MaskDP, ``has_private`` / ``has_public`` (N,) say whether a video has any token of each
    kind: a video without private tokens contributes no private gradient (nothing of it is
    private), one without public tokens no public gradient.
    """

    units: torch.Tensor
    labels: torch.Tensor
    public: torch.Tensor | None = None  # (N, ...): the public-token view of each video (maskdp)
    has_private: torch.Tensor | None = None
    has_public: torch.Tensor | None = None

    def private_weights(self, part: torch.Tensor) -> torch.Tensor:
        return torch.ones(len(part)) if self.has_private is None else self.has_private[part].float()

    def public_weights(self, part: torch.Tensor) -> torch.Tensor:
        return torch.ones(len(part)) if self.has_public is None else self.has_public[part].float()


@dataclass
class Outcome:
    history: list[dict[str, float]]
    privacy: SgdPrivacy
    engine_epsilon: float | None = None  # what Opacus's own PrivacyEngine reports (dp_sgd), beside ours


def schedule(count: int, recipe: Recipe) -> tuple[float, int]:
    """(q, steps) of a run over ``count`` units."""
    steps_per_epoch = math.ceil(count / recipe.batch_size)
    return 1.0 / steps_per_epoch, steps_per_epoch * recipe.epochs


def noise_for(target_epsilon: float, data: PrivateData, recipe: Recipe) -> float:
    """σ for the target ε over the whole run; 0 when no video has a private token (nothing to protect)."""
    if data.has_private is not None and not bool(data.has_private.any()):
        return 0.0
    rate, steps = schedule(len(data.labels), recipe)
    return calibrate(target_epsilon, recipe.delta, rate, steps, recipe.accountant)


def require_sample_independence(module: nn.Module) -> None:
    """Refuse a module whose BatchNorm mixes samples: no per-sample gradient, so no DP guarantee."""
    if has_batch_norm(module):
        raise PrivharError(f"private training: the model has BatchNorm layers ({type(module).__name__}), which mix the "
                           "samples of a batch; DP-SGD needs per-sample gradients: use GroupNorm or LayerNorm")


def without_dropout(module: nn.Module) -> nn.Module:
    """Training mode (Opacus checks it) with every dropout layer off: private training adds noise instead."""
    module.train()
    for layer in module.modules():
        if isinstance(layer, nn.modules.dropout._DropoutNd):
            layer.eval()
    return module


def _optimiser(module: nn.Module, recipe: Recipe) -> torch.optim.SGD:
    return torch.optim.SGD(list(trainable_parameters(module).values()), lr=recipe.learning_rate, momentum=recipe.momentum)


def train_grouped(module: nn.Module, data: PrivateData, recipe: Recipe, noise_multiplier: float,
                  generator: torch.Generator) -> Outcome:
    """Multi-clip DP-SGD (``data.public`` None) or MaskDP-SGD: the step of :mod:`tasks.private.gradients`."""
    require_sample_independence(module)
    count = len(data.labels)
    rate, steps = schedule(count, recipe)
    steps_per_epoch = steps // recipe.epochs
    optimiser = _optimiser(module, recipe)
    without_dropout(module)
    history = []
    for epoch in range(1, recipe.epochs + 1):
        clipped, seen, loss_sum = 0, 0, 0.0
        for _ in range(steps_per_epoch):
            chosen = torch.nonzero(torch.rand(count, generator=generator) < rate).flatten()
            total = {name: torch.zeros_like(parameter) for name, parameter in trainable_parameters(module).items()}
            for part in chosen.split(recipe.physical_batch_size):
                weights = data.private_weights(part)
                gradients, losses = per_unit_gradients(module, data.units[part], data.labels[part])
                unit_gradients = {name: g * weights.view(-1, *[1] * (g.dim() - 1)) for name, g in gradients.items()}
                summed, norms = clip_and_sum(unit_gradients, recipe.max_grad_norm)
                clipped += int((norms > recipe.max_grad_norm).sum())
                total = {name: total[name] + summed[name] for name in total}
                if data.public is not None:  # Algorithm 1 line 6: public tokens, summed, never clipped
                    public_weights = data.public_weights(part)
                    public = summed_gradient(module, lambda: (F.cross_entropy(module(data.public[part]), data.labels[part],
                                                                              reduction="none") * public_weights).sum())
                    total = {name: total[name] + public[name] for name in total}
                loss_sum += float(losses.sum())
            apply_gradient(module, add_noise(total, noise_multiplier, recipe.max_grad_norm, generator), rate * count)
            optimiser.step()
            optimiser.zero_grad(set_to_none=True)
            seen += len(chosen)
        history.append({"epoch": epoch, "loss": loss_sum / max(seen, 1), "clipped_fraction": clipped / max(seen, 1),
                        "sampled": seen})
    return Outcome(history, SgdPrivacy(noise_multiplier, rate, steps, recipe.delta, recipe.accountant))


def _no_per_sample_gradients(module: nn.Module) -> None:
    """Per-sample gradients of an empty batch (0, *shape), which ExpandedWeights cannot compute (batch size 0)."""
    for parameter in trainable_parameters(module).values():
        parameter.grad_sample = torch.zeros(0, *parameter.shape)


def train_dp_sgd(module: nn.Module, data: PrivateData, recipe: Recipe, target_epsilon: float,
                 generator: torch.Generator) -> Outcome:
    """DP-SGD with Opacus: ``make_private_with_epsilon`` (Poisson sampling) and ``BatchMemoryManager``.

    Opacus draws the Poisson batches from torch's global generator: seed it before the call.
    """
    require_sample_independence(module)
    inputs = data.units[:, 0]
    loader = DataLoader(TensorDataset(inputs, data.labels), batch_size=recipe.batch_size)
    engine = PrivacyEngine(accountant=recipe.accountant)
    without_dropout(module)
    private_module, optimiser, private_loader = engine.make_private_with_epsilon(
        module=module, optimizer=_optimiser(module, recipe), data_loader=loader, target_epsilon=target_epsilon,
        target_delta=recipe.delta, epochs=recipe.epochs, max_grad_norm=recipe.max_grad_norm, poisson_sampling=True,
        noise_generator=generator, grad_sample_mode=recipe.grad_sample_mode)
    history = []
    try:
        for epoch in range(1, recipe.epochs + 1):
            loss_sum, seen, empty = 0.0, 0, 0
            with BatchMemoryManager(data_loader=private_loader, max_physical_batch_size=recipe.physical_batch_size,
                                    optimizer=optimiser) as batches:
                for features, labels in batches:
                    optimiser.zero_grad(set_to_none=True)
                    if len(labels):
                        loss = F.cross_entropy(private_module(features), labels)
                        loss.backward()
                        loss_sum, seen = loss_sum + float(loss) * len(labels), seen + len(labels)
                    else:  # an empty Poisson batch is still a step: nothing to clip, the noise alone
                        _no_per_sample_gradients(module)
                        empty += 1
                    optimiser.step()
            history.append({"epoch": epoch, "loss": loss_sum / max(seen, 1), "sampled": seen, "empty_batches": empty})
    finally:
        private_module.remove_hooks()
    rate, steps = schedule(len(data.labels), recipe)
    return Outcome(history, SgdPrivacy(float(optimiser.noise_multiplier), rate, steps, recipe.delta, recipe.accountant),
                   engine_epsilon=float(engine.get_epsilon(recipe.delta)))
