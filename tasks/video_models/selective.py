"""Selective tuning (paper 003 §3, eq. 8-10): train a named subset θ_t of the parameters, freeze the rest.

``private.trainable`` names the subset of the classifier of :mod:`tasks.video_models.models` or a backbone of
:mod:`tasks.video_models.backbones` (both: blocks whose last is the head):

    all                   every parameter
    head                  the final linear layer (blocks.<last>.proj: blocks.4.proj of privhar's model)
    norms_and_head        every normalisation layer's weight and bias, and the head (003's choice for CNNs)
    last_stage_and_head   the last stage (blocks.3 of privhar's model; a backbone names its own) and the head
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
from tasks.video_models.models import FoldedNorm, has_batch_norm

NAMED = ("all", "head", "norms_and_head", "last_stage_and_head")


def _head_block(model: nn.Module) -> str:
    return f"blocks.{len(model.blocks) - 1}."


def _norm_names(model: nn.Module) -> set[str]:
    """Parameters of the normalisation layers: GroupNorm / LayerNorm, and a BatchNorm folded into a scale and shift."""
    return {
        f"{name}.{parameter}"
        for name, module in model.named_modules()
        if isinstance(module, (nn.GroupNorm, nn.LayerNorm, FoldedNorm))
        for parameter, _ in module.named_parameters(recurse=False)
    }


def _named_preset(model: nn.Module, choice: str) -> set[str]:
    """The parameter names of a named preset, for privhar's classifier and every backbone alike: the head is the
    last block's ``proj``, the last stage the prefixes the model names (``last_stage``) or the block before the head."""
    head = _head_block(model) + "proj."
    last = getattr(model, "last_stage", (f"blocks.{len(model.blocks) - 2}.",))
    names = [name for name, _ in model.named_parameters()]
    if choice == "all":
        return set(names)
    if choice == "head":
        return {name for name in names if name.startswith(head)}
    if choice == "norms_and_head":
        return _norm_names(model) | {name for name in names if name.startswith(head)}
    return {name for name in names if name.startswith((head, *last))}


def trainable_pattern(choice: str) -> re.Pattern[str]:
    """The regular expression a ``private.trainable`` value other than a named preset stands for."""
    try:
        return re.compile(choice)
    except re.error as error:
        raise PrivharError(
            f"private.trainable = {choice!r} is invalid: not a name ({', '.join(NAMED)}) "
            f"nor a regular expression ({error})"
        ) from None


def select_trainable(model: nn.Module, choice: str) -> list[str]:
    """Freeze every parameter outside ``choice``; return the trainable names (one line if none match)."""
    chosen = (
        _named_preset(model, choice)
        if choice in NAMED
        else {
            name for name, _ in model.named_parameters() if trainable_pattern(choice).search(name)
        }
    )
    names = []
    for name, parameter in model.named_parameters():
        parameter.requires_grad_(name in chosen)
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
