"""The frozen part of a selectively tuned model, run once: pooled features for the head.

With ``private.trainable: head`` only the final linear layer learns, so everything below it is
a fixed function of the clip. Its output — the globally pooled last-stage activations, the
input of ``blocks.4.proj`` — is computed once per view of each video, and private training
runs on the head alone: the same per-sample gradients, clipping, noise and ε as training the
whole wrapped model, at a fraction of the cost (a test checks the equality).
"""

from __future__ import annotations

import torch
from torch import nn

from tasks.core.models import CLASSIFIER as HEAD


def head_of(model: nn.Module) -> nn.Linear:
    return model.get_submodule(HEAD)


@torch.no_grad()
def pooled_features(model: nn.Module, inputs: torch.Tensor, batch_size: int = 32) -> torch.Tensor:
    """(N, C) inputs of the head for normalised clips (N, 3, T, H, W); the model's weights untouched."""
    was_training = model.training
    model.eval()
    blocks = model.blocks
    pool = blocks[-1].pool
    out = []
    for part in inputs.split(batch_size):
        activations = part
        for block in blocks[:-1]:
            activations = block(activations)
        out.append(pool(activations).flatten(1))
    model.train(was_training)
    return torch.cat(out)
