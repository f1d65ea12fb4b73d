"""One epoch of Opacus DP-SGD: what the single-process trainer (tasks/private/methods.py) and each DPDDP rank
(tasks/private/distributed.py) both run, so that neither imports the other.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from opacus.utils.batch_memory_manager import BatchMemoryManager
from torch import nn
from torch.utils.data import DataLoader

from tasks.video_models.selective import trainable_parameters

StepCallback = Callable[
    [int, int, nn.Module], None
]  # (step, units sampled, module) after each update


def opacus_epoch(
    private_module: nn.Module,
    module: nn.Module,
    optimiser: torch.optim.Optimizer,
    private_loader: DataLoader,
    physical_batch_size: int,
    device: torch.device,
    on_step: StepCallback | None = None,
) -> tuple[float, int, int]:
    """One epoch of Opacus DP-SGD steps (in one process or one DPDDP rank): (summed loss, rows seen, empty batches).

    An empty Poisson batch is still a step: nothing to clip, the noise alone (and, across ranks, the others' sums).
    ``on_step`` sees each logical step's iterate (the physical batches BatchMemoryManager skips are not steps).
    """
    loss_sum, seen, empty = 0.0, 0, 0
    step, sampled = 0, 0
    with BatchMemoryManager(
        data_loader=private_loader, max_physical_batch_size=physical_batch_size, optimizer=optimiser
    ) as batches:
        for features, labels in batches:
            features, labels = (
                features.to(device, non_blocking=True),
                labels.to(device, non_blocking=True),
            )
            optimiser.zero_grad(set_to_none=True)
            if len(labels):
                loss = F.cross_entropy(private_module(features), labels)
                loss.backward()
                loss_sum, seen = loss_sum + float(loss.detach()) * len(labels), seen + len(labels)
            else:
                _no_per_sample_gradients(module)
                empty += 1
            optimiser.step()
            sampled += len(labels)
            if on_step is not None and not getattr(optimiser, "_is_last_step_skipped", False):
                step += 1
                on_step(step, sampled, module)
                sampled = 0
    return loss_sum, seen, empty


def _no_per_sample_gradients(module: nn.Module) -> None:
    """Per-sample gradients of an empty batch (0, *shape), which ExpandedWeights cannot compute (batch size 0)."""
    for parameter in trainable_parameters(module).values():
        parameter.grad_sample = torch.zeros(0, *parameter.shape, device=parameter.device)
