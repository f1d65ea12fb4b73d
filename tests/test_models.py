"""The shared classifier: built from pytorchvideo blocks, DP-compatible normalisation."""

import torch
from torch import nn

from tasks.video_models.models import GroupNorm3d, create_video_classifier, has_batch_norm


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
    from tasks.video_models.checkpoints import checkpoint_config, load_checkpoint

    config = {
        "num_classes": 4,
        "width": 8,
        "norm_groups": 4,
        "dropout": 0.0,
        "input_size": [8, 32, 40],
    }
    model = create_video_classifier(num_classes=4, width=8)
    torch.save({"state_dict": model.state_dict(), "config": config}, tmp_path / "model.pt")
    assert (
        checkpoint_config(tmp_path / "model.pt")
        == config
        == load_checkpoint(str(tmp_path / "model.pt"))[1]
    )


def test_the_motion_view_sees_what_moved_not_what_stands_still():
    """train.input = motion: a still picture added to every frame changes nothing; a moving one does."""
    torch.manual_seed(0)
    model = create_video_classifier(
        num_classes=5, width=8, input_view="motion", head_pool="max"
    ).eval()
    clip = torch.randn(2, 3, 8, 32, 40)
    still = torch.randn(2, 3, 1, 32, 40)
    with torch.no_grad():
        assert torch.allclose(model(clip), model(clip + still), atol=1e-5)
        assert not torch.allclose(model(clip), model(clip + torch.randn_like(clip)), atol=1e-3)


def test_the_rgb_and_motion_view_stacks_six_channels_and_unknown_views_are_one_line_errors():
    import pytest

    from tasks.core.errors import PrivharError

    model = create_video_classifier(num_classes=5, width=8, input_view="rgb_motion")
    assert model.blocks[0].conv.in_channels == 6 and model(torch.zeros(1, 3, 8, 32, 40)).shape == (
        1,
        5,
    )
    with pytest.raises(
        PrivharError, match="unknown train.input view 'depth'; known: motion, rgb, rgb_motion"
    ):
        create_video_classifier(num_classes=5, width=8, input_view="depth")


def test_a_checkpoint_saved_before_input_views_loads_as_rgb_with_average_pooling(tmp_path):
    from tasks.video_models.checkpoints import load_checkpoint

    config = {
        "num_classes": 4,
        "width": 8,
        "norm_groups": 4,
        "dropout": 0.0,
        "input_size": [32, 40],
    }
    old = create_video_classifier(num_classes=4, width=8)
    torch.save({"state_dict": old.state_dict(), "config": config}, tmp_path / "model.pt")
    model, _ = load_checkpoint(str(tmp_path / "model.pt"))
    assert isinstance(model.blocks[0].view, nn.Identity) and isinstance(
        model.blocks[-1].pool, nn.AdaptiveAvgPool3d
    )
