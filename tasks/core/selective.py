"""Selective tuning (paper 003 §3, eq. 8-10): train a named subset θ_t of the parameters, freeze the rest.

``private.trainable`` names the subset of the classifier of :mod:`tasks.core.models`:

    all                   every parameter
    head                  the final linear layer (blocks.4.proj)
    norms_and_head        every GroupNorm weight and bias, and the head (003's choice for CNNs)
    last_stage_and_head   the last residual stage (blocks.3) and the head
    <regex>               parameters whose name matches (re.search)

Frozen parameters get ``requires_grad = False``: Opacus then computes no per-sample gradient
for them, the DP noise covers only θ_t (its dimension is what the noise scales with), and a
federated client's update carries only θ_t. What every DP trainer asks of the model lives here too (its trainable
parameters, no layer that mixes the samples of a batch, dropout off): below the stages, since train-private and
train-federated both train privately.
"""

from __future__ import annotations

import re

from torch import nn

from tasks.core.errors import PrivharError
from tasks.core.models import has_batch_norm

NAMED = {
    "all": r".",
    "head": r"^blocks\.4\.",
    "norms_and_head": r"(norm[^.]*\.(weight|bias)$)|(^blocks\.4\.)",
    "last_stage_and_head": r"^blocks\.(3|4)\.",
}


def trainable_pattern(choice: str) -> re.Pattern[str]:
    """The regular expression a ``private.trainable`` value stands for."""
    try:
        return re.compile(NAMED.get(choice, choice))
    except re.error as error:
        raise PrivharError(
            f"private.trainable = {choice!r} is invalid: not a name ({', '.join(NAMED)}) "
            f"nor a regular expression ({error})"
        ) from None


def select_trainable(model: nn.Module, choice: str) -> list[str]:
    """Freeze every parameter outside ``choice``; return the trainable names (one line if none match)."""
    pattern = trainable_pattern(choice)
    names = []
    for name, parameter in model.named_parameters():
        parameter.requires_grad_(bool(pattern.search(name)))
        if parameter.requires_grad:
            names.append(name)
    if not names:
        raise PrivharError(
            f"private.trainable = {choice!r} matches no parameter of the model "
            f"(names look like {next(iter(dict(model.named_parameters())))!r})"
        )
    return names


def trainable_count(model: nn.Module) -> int:
    return sum(parameter.numel() for parameter in model.parameters() if parameter.requires_grad)


def trainable_parameters(module: nn.Module) -> dict[str, nn.Parameter]:
    """θ_t: the parameters that learn (requires_grad), by name."""
    return {
        name: parameter for name, parameter in module.named_parameters() if parameter.requires_grad
    }


def require_sample_independence(module: nn.Module) -> None:
    """Refuse a module whose BatchNorm mixes samples: no per-sample gradient, so no DP guarantee."""
    if has_batch_norm(module):
        raise PrivharError(
            f"private training: the model has BatchNorm layers ({type(module).__name__}), which mix the "
            "samples of a batch; DP-SGD needs per-sample gradients: use GroupNorm or LayerNorm"
        )


def without_dropout(module: nn.Module) -> nn.Module:
    """Training mode (Opacus checks it) with every dropout layer off: private training adds noise instead."""
    module.train()
    for layer in module.modules():
        if isinstance(layer, nn.modules.dropout._DropoutNd):
            layer.eval()
    return module
