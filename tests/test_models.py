"""The shared classifier: built from pytorchvideo blocks, DP-compatible normalisation."""

import torch
from torch import nn

from tasks.core.models import GroupNorm3d, create_video_classifier, has_batch_norm


def test_no_batch_norm_and_group_norm_everywhere():
    model = create_video_classifier(num_classes=7, width=8)
    assert not has_batch_norm(model)
    assert any(isinstance(module, GroupNorm3d) for module in model.modules())


def test_norm_is_injectable():
    model = create_video_classifier(num_classes=3, width=8, norm=nn.BatchNorm3d)
    assert has_batch_norm(model)


def test_per_sample_independence():
    """With GroupNorm, a sample's output does not depend on the rest of the batch (DP-SGD needs this)."""
    torch.manual_seed(0)
    model = create_video_classifier(num_classes=5, width=8).eval()
    batch = torch.randn(3, 3, 8, 32, 40)
    alone = model(batch[:1])
    together = model(batch)[:1]
    assert torch.allclose(alone, together, atol=1e-5)
