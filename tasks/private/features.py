"""The frozen part of a selectively tuned model, run once: pooled features for the head.

With ``private.trainable: head`` only the final linear layer learns, so everything below it is
a fixed function of the clip. Its output — the globally pooled last-stage activations, the
input of ``blocks.4.proj`` — is computed once per view of each video, and private training
runs on the head alone: the same per-sample gradients, clipping, noise and ε as training the
whole wrapped model, at a fraction of the cost (a test checks the equality).
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from tasks.core.models import CLASSIFIER as HEAD


def head_of(model: nn.Module) -> nn.Linear:
    return model.get_submodule(HEAD)


@torch.no_grad()
def pooled_features(model: nn.Module, inputs: torch.Tensor, batch_size: int = 32) -> torch.Tensor:
    """(N, C) inputs of the head for normalised clips (N, 3, T, H, W); the model's weights untouched."""
    head = len(model.blocks) - 1
    pool = model.blocks[head].pool
    return torch.cat([pool(prefix_activations(model, part, head, batch_size)).flatten(1) for part in inputs.split(batch_size)])


def first_trainable_block(model: nn.Module) -> int:
    """Index of the first block of ``model.blocks`` with a trainable parameter: everything before it is frozen."""
    for index, block in enumerate(model.blocks):
        if any(parameter.requires_grad for parameter in block.parameters()):
            return index
    return len(model.blocks)


@torch.no_grad()
def prefix_activations(model: nn.Module, inputs: torch.Tensor, end: int, batch_size: int = 32) -> torch.Tensor:
    """Outputs of the frozen blocks ``model.blocks[:end]`` for normalised clips: the tail's inputs, computed once."""
    was_training = model.training
    model.eval()
    out = []
    for part in inputs.split(batch_size):
        for block in model.blocks[:end]:
            part = block(part)
        out.append(part)
    model.train(was_training)
    return torch.cat(out)


def tail_of(model: nn.Module, end: int) -> nn.Module:
    """A copy of ``model`` whose first ``end`` blocks are identities: it maps prefix activations to logits.

    Parameter names stay those of the full model (``blocks.4.proj.weight``), so a tail's state
    and updates load straight back into the full model.
    """
    tail = copy.deepcopy(model)
    for index in range(end):
        tail.blocks[index] = nn.Identity()
    return tail
