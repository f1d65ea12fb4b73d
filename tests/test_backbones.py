"""The field's backbones (tasks/video_models/backbones.py, issue 34), each at a tiny clip: built, a written checkpoint of
another label set loaded, made DP-ready (exactly: the folded model computes what the published one did), put in
privhar's block layout (the same logits; the head-feature cache and the tuning presets apply), one DP-SGD step under
Opacus with per-sample gradients, one evaluation pass, an MLflow signature with the clip's shape, rebuilt from the
config a stage saves."""

import re

import numpy as np
import pytest
import torch
from torch import nn

from tasks.core.clip_shapes import zoo_clip
from tasks.core.errors import PrivharError
from tasks.video_models.backbones import BACKBONES, backbone, build_backbone, dp_ready, load_weights
from tasks.video_models.checkpoints import build_from_config
from tasks.video_models.head_features import head_of, pooled_features, splits_at_head
from tasks.video_models.models import head_name
from tasks.video_models.selective import NAMED, select_trainable

TINY = {"frames": 4, "size": 32}


def published(name: str, classes: int) -> nn.Module:
    """The backbone as its source builds it, with BatchNorm statistics that are not the initial ones."""
    model = BACKBONES[name].build(classes, zoo_clip(name, **TINY))
    model.train()
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for _ in range(2):
            model(torch.rand(2, 3, TINY["frames"], TINY["size"], TINY["size"], generator=generator))
    return model.eval()


def write_checkpoint(model: nn.Module, name: str, path) -> None:
    """In the layout of the backbone's source: torchvision a bare state dict, pytorchvideo's zoo ``model_state``."""
    state = model.state_dict()
    torch.save(state if name == "r2plus1d_r18" else {"model_state": state}, path)


@pytest.mark.parametrize("name", list(BACKBONES))
def test_a_backbone_loads_a_checkpoint_and_takes_a_dp_sgd_step(name, tmp_path):
    from opacus import PrivacyEngine
    from opacus.validators import ModuleValidator

    entry, clip = BACKBONES[name], zoo_clip(name, **TINY)
    source = published(name, classes=7)
    write_checkpoint(source, name, tmp_path / "weights.pt")
    model = entry.build(5, clip)
    dropped = load_weights(model, tmp_path / "weights.pt", entry)
    assert dropped and all(key.startswith(entry.classifier + ".") for key in dropped)
    clips = torch.rand(
        3, 3, clip.frames, clip.size, clip.size, generator=torch.Generator().manual_seed(2)
    )
    model.eval()
    with torch.no_grad():
        pretrained = model(clips)
        dp_ready(model, "folded")
        folded = model(clips)
    torch.testing.assert_close(folded, pretrained, rtol=1e-3, atol=1e-4)  # folding is exact
    # in privhar's block layout, behind the clip adapter: the same logits for privhar's normalisation of a 4:3 clip
    # whose centre square is the clip above
    wrapped = build_backbone(name, 5, clip, weights=tmp_path / "weights.pt").eval()
    head_of(wrapped).load_state_dict(model.get_submodule(entry.classifier).state_dict())
    mean, std = (torch.tensor(value).view(1, 3, 1, 1, 1) for value in (clip.mean, clip.std))
    wide = torch.zeros(3, 3, clip.frames, clip.size, clip.size * 4 // 3)
    left = (wide.shape[-1] - clip.size) // 2
    wide[..., left : left + clip.size] = (clips * std + mean - 0.45) / 0.225
    with torch.no_grad():
        logits = wrapped(wide)
        cached = head_of(wrapped)(pooled_features(wrapped, wide))
    torch.testing.assert_close(logits, folded, rtol=1e-3, atol=1e-4)
    assert splits_at_head(wrapped)  # the head-feature cache applies: logits = head(pooled features)
    torch.testing.assert_close(cached, logits)
    model = wrapped
    assert ModuleValidator.validate(model.train(), strict=False) == []
    head, norms, last = (select_trainable(model, preset) for preset in NAMED[1:])
    assert head == [head_name(model) + ".weight", head_name(model) + ".bias"]
    assert set(head) < set(norms) and set(head) < set(last)
    assert any(key.startswith(entry.last_stage) for key in last)
    assert len(select_trainable(model, "all")) == len(list(model.parameters()))
    before = {
        key: value.detach().clone()
        for key, value in model.named_parameters()
        if value.requires_grad
    }

    data = torch.utils.data.TensorDataset(clips[:2], torch.tensor([0, 4]))
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    private, optimizer, loader = PrivacyEngine().make_private(
        module=model.train(),
        optimizer=optimizer,
        data_loader=torch.utils.data.DataLoader(data, batch_size=2),
        noise_multiplier=1.0,
        max_grad_norm=1.0,
        poisson_sampling=False,
    )
    for batch, labels in loader:
        nn.functional.cross_entropy(private(batch), labels).backward()
        samples = {p.grad_sample.shape[0] for p in private.parameters() if p.requires_grad}
        assert samples == {2}  # a gradient per sample for every trained parameter
        optimizer.step()
    after = dict(private._module.named_parameters())
    assert all(not torch.equal(after[key], value) for key, value in before.items())

    private.eval()
    with torch.no_grad():
        scores = private(clips)
    assert scores.shape == (3, 5) and torch.isfinite(scores).all()
    from mlflow.models import infer_signature

    signature = infer_signature(clips.numpy(), scores.numpy())
    assert tuple(signature.inputs.to_dict()[0]["tensor-spec"]["shape"]) == (-1, 3, 4, 32, 32)
    # what a stage saves, the next rebuilds from the checkpoint's config alone
    rebuilt = build_from_config(
        {
            "backbone": name,
            "backbone_norm": "folded",
            "backbone_frames": TINY["frames"],
            "backbone_size": TINY["size"],
            "num_classes": 5,
        }
    )
    rebuilt.load_state_dict(private._module.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(rebuilt.eval()(clips), scores)


def test_group_norm_keeps_gamma_and_beta_and_passes_the_validator():
    from opacus.validators import ModuleValidator

    model = dp_ready(published("x3d_xs", classes=3), "group")
    assert not any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())
    assert ModuleValidator.validate(model.train(), strict=False) == []


def test_a_checkpoint_that_does_not_fit_is_one_line(tmp_path):
    write_checkpoint(published("x3d_xs", classes=3), "x3d_xs", tmp_path / "x3d.pyth")
    entry = backbone("slow_r50")
    with pytest.raises(PrivharError) as refused:
        load_weights(entry.build(3, zoo_clip("slow_r50", **TINY)), tmp_path / "x3d.pyth", entry)
    message = str(refused.value)
    assert message.startswith(f"{tmp_path / 'x3d.pyth'}: ") and "\n" not in message
    assert "shapes differ from slow_r50's" in message or "not a slow_r50 checkpoint" in message
    np.save(tmp_path / "frames.npy", np.zeros(3))
    with pytest.raises(PrivharError, match="cannot be read as a torch checkpoint"):
        load_weights(entry.build(3, zoo_clip("slow_r50", **TINY)), tmp_path / "frames.npy", entry)
    # issue 61: "cannot be read as a torch checkpoint ()" for an empty file, "(101)" for a text one, "not found" for
    # a folder; now each says what the file is
    (tmp_path / "empty.pyth").write_bytes(b"")
    (tmp_path / "saved.pyth").write_text(
        "https://dl.fbaipublicfiles.com/pytorchvideo/model_zoo/X3D_S.pyth\n"
    )
    for named, said in (
        ("empty.pyth", "model.weights is an empty file; expected a checkpoint"),
        ("saved.pyth", "not a checkpoint (a text file)"),
        ("", "model.weights is a folder; expected a checkpoint file"),
    ):
        with pytest.raises(PrivharError, match=re.escape(said)):
            load_weights(entry.build(3, zoo_clip("slow_r50", **TINY)), tmp_path / named, entry)
    with pytest.raises(
        PrivharError, match="model.backbone = 'resnet9000' is invalid: expected one of x3d_xs"
    ):
        backbone("resnet9000")


def test_a_backbone_clip_replaces_decode_and_train_sizes_and_a_bad_name_is_one_line(tmp_path):
    from tasks.core.params import ModelParams
    from tasks.core.params_files import load_decode, load_section, load_train
    from tests.conftest import write_params

    own = write_params(tmp_path)  # privhar's model: decode's and train's own values
    assert load_decode(own).frames == 4 and load_section(own, "model", ModelParams).weights is None
    zoo = write_params(tmp_path, {"model": {"backbone": "x3d_s"}})
    decode, train = load_decode(zoo), load_train(zoo)
    assert (decode.frames, decode.fps, decode.frame_size) == (13, 5.0, [160, 214])
    assert train.input_size == [160, 214]
    small = write_params(tmp_path, {"model": {"backbone": "slow_r50", "frames": 4, "crop": 64}})
    assert load_decode(small).frame_size == [64, 86] and load_decode(small).fps == 3.75
    bad = write_params(tmp_path, {"model": {"backbone": "resnet9000"}})
    with pytest.raises(PrivharError) as refused:
        load_decode(bad)
    assert "model.backbone = 'resnet9000' is invalid" in str(refused.value)
    assert "\n" not in str(refused.value)


def test_zoo_weights_come_from_the_sources_table_and_a_failed_download_is_one_line(
    tmp_path, monkeypatch
):
    """``model.weights: zoo``: the URL is the source library's own; without a network (the download refused here,
    so nothing is fetched) one line names the URL and what to do instead."""
    import urllib.error

    from tasks.video_models.backbones import published_url, weights_file

    assert published_url("x3d_s").endswith("/kinetics/X3D_S.pyth")
    assert published_url("r2plus1d_r18").startswith(
        "https://download.pytorch.org/models/r2plus1d_18"
    )
    monkeypatch.setattr(torch.hub, "get_dir", lambda: str(tmp_path / "hub"))

    def refused(url, destination, progress=True):
        raise urllib.error.URLError("no network")

    monkeypatch.setattr(torch.hub, "download_url_to_file", refused)
    with pytest.raises(PrivharError) as failed:
        weights_file("zoo", "slow_r50")
    message = str(failed.value)
    assert message.startswith("model.weights = zoo: https://") and "SLOW_8x8_R50.pyth" in message
    assert "set model.weights to the file" in message and "\n" not in message
    cached = tmp_path / "hub" / "checkpoints" / "SLOW_8x8_R50.pyth"
    cached.parent.mkdir(parents=True, exist_ok=True)
    cached.write_bytes(b"")
    assert weights_file("zoo", "slow_r50") == cached  # downloaded once: the cached file is used
    assert weights_file(str(tmp_path / "mine.pyth"), "slow_r50") == tmp_path / "mine.pyth"
