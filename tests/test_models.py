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


def test_checkpoint_config_is_the_saved_config_without_the_model(tmp_path):
    from tasks.core.models import checkpoint_config, load_checkpoint

    config = {"num_classes": 4, "width": 8, "norm_groups": 4, "dropout": 0.0, "input_size": [8, 32, 40]}
    model = create_video_classifier(num_classes=4, width=8)
    torch.save({"state_dict": model.state_dict(), "config": config}, tmp_path / "model.pt")
    assert checkpoint_config(tmp_path / "model.pt") == config == load_checkpoint(str(tmp_path / "model.pt"))[1]
