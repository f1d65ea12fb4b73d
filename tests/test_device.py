"""base.device: resolution, its errors, every torch stage on the CPU through it, and (with a GPU) the GPU paths."""

import math

import numpy as np
import pytest
import torch
import yaml
from conftest import sections, write_params

from tasks.core.errors import PrivharError
from tasks.core.params import BaseParams
from tasks.core.params_files import load_section
from tasks.dprp.mechanism import Projection, protect_video
from tasks.video_models.device import describe, mixed_precision, resolve_device, to_device

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def test_auto_is_the_gpu_when_there_is_one_and_the_cpu_otherwise():
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    assert resolve_device("cpu") == torch.device("cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_asking_for_a_gpu_that_is_not_there_is_one_line():
    with pytest.raises(
        PrivharError, match=r"base.device = 'cuda': torch sees no CUDA GPU here.*use auto or cpu"
    ) as error:
        resolve_device("cuda")
    assert "\n" not in str(error.value)


def test_a_device_name_torch_does_not_know_is_refused_by_the_params_check(tmp_path):
    params = write_params(tmp_path, {"base": {"device": "gpu0"}})
    with pytest.raises(PrivharError, match="base.device") as error:
        load_section(params, "base", BaseParams)
    assert "\n" not in str(error.value)
    with pytest.raises(PrivharError, match="expected auto, cpu, cuda or cuda:N"):
        resolve_device("gpu0")


def test_on_the_cpu_moving_and_autocast_change_nothing():
    clips = torch.randint(0, 255, (2, 3, 4, 8, 8), dtype=torch.uint8)
    assert to_device(clips, torch.device("cpu")) is clips
    with mixed_precision(torch.device("cpu")):
        assert (clips.float() @ torch.ones(8, 1)).dtype == torch.float32  # no bf16 on the CPU
    assert describe(torch.device("cpu"))["device"] == "cpu"


def test_the_device_generator_regenerates_each_block_of_r_exactly():
    """generator="torch" (what a GPU uses) seeds each block from (seed, index): a block drawn twice is the same."""
    projection = Projection(seed=9, d=300, k=24, block_rows=64, generator="torch")
    first, second = projection.dense(), projection.dense()
    assert torch.equal(first, second)
    other = Projection(seed=10, d=300, k=24, block_rows=64, generator="torch").dense()
    assert not torch.equal(first, other)
    # entries N(0, 1/k): 7 200 draws, mean and variance within 5 standard errors
    values = first.double().flatten()
    assert abs(values.mean().item()) < 5 / math.sqrt(values.numel() * 24)
    assert abs(values.var().item() * 24 - 1) < 5 * math.sqrt(2 / values.numel())


@pytest.mark.parametrize("generator", ["numpy", "torch"])
def test_full_rank_reconstruction_is_the_least_squares_back_projection_for_either_generator(
    generator,
):
    """X̃ = P̃ R⁺ (the mechanism's Cholesky path) against float64 lstsq on the same dense R."""
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, (5, 6, 7, 3), dtype=np.uint8)
    projection = Projection(seed=4, d=6 * 7 * 3, k=20, block_rows=50, generator=generator)
    protected = protect_video(frames, projection, sigma1=3.0, sigma2=3.0, rank=1.0, noise_seed=1)
    r = projection.dense().double()
    expected = torch.linalg.lstsq(
        r.T, protected.projected.T.double()
    ).solution.T  # X̃ R = P̃, least norm
    expected = expected.round().clamp(0, 255).to(torch.uint8).numpy().reshape(frames.shape)
    assert (
        np.abs(protected.frames.astype(int) - expected.astype(int)).max() <= 1
    )  # rounding at .5 only


def test_train_and_evaluate_run_on_the_device_base_device_names(tiny_decoded, tmp_path):
    """base.device: cpu end to end through the training and evaluation stages; the runs carry the device."""
    from mlflow import MlflowClient

    from flows.stage_commands import stage_call

    train = stage_call("train")
    from tasks.evaluate import evaluate
    from tasks.video_models.model_registry import newest_version

    params = tmp_path / "params.yaml"
    config = yaml.safe_load((tiny_decoded / "params.yaml").read_text())
    config["base"]["device"] = "cpu"
    params.write_text(yaml.safe_dump(config))
    train(
        params_path=params,
        frames=tiny_decoded / "data/decode",
        out=tmp_path / "train/device-cpu",
        report=tmp_path / "reports",
        family="device",
    )
    version = newest_version("device-cpu")
    assert MlflowClient().get_run(version.run_id).data.tags["privhar.device"] == "cpu"
    metrics = evaluate(
        **sections(params, base="base", params="evaluate"),
        frames=tiny_decoded / "data/decode",
        models=[tmp_path / "train"],
        out=tmp_path / "evaluate",
    )
    assert 0 <= metrics["device-cpu"]["top1"] <= 1


@pytest.mark.gpu
@needs_gpu
def test_dprp_on_the_gpu_matches_the_cpu_on_the_same_r():
    """The same (NumPy) R on both devices: float32 products, float64 solves; within one grey level."""
    rng = np.random.default_rng(1)
    frames = rng.integers(0, 256, (16, 24, 32, 3), dtype=np.uint8)
    outputs = []
    for device in ("cpu", "cuda"):
        projection = Projection(
            seed=2, d=24 * 32 * 3, k=192, block_rows=512, device=torch.device(device)
        )
        outputs.append(
            protect_video(frames, projection, sigma1=5.0, sigma2=5.0, rank=1.0, noise_seed=3).frames
        )
    assert np.abs(outputs[0].astype(int) - outputs[1].astype(int)).max() <= 1


@pytest.mark.gpu
@needs_gpu
def test_train_on_the_gpu_saves_a_checkpoint_that_loads_on_the_cpu(tiny_decoded, tmp_path):
    from flows.stage_commands import stage_call

    train = stage_call("train")
    from tasks.video_models.checkpoints import load_checkpoint

    params = tmp_path / "params.yaml"
    config = yaml.safe_load((tiny_decoded / "params.yaml").read_text())
    config["base"]["device"] = "cuda"
    params.write_text(yaml.safe_dump(config))
    train(
        params_path=params,
        frames=tiny_decoded / "data/decode",
        out=tmp_path / "train/gpu",
        report=tmp_path / "r",
        family="device-gpu",
    )
    model, _ = load_checkpoint(str(tmp_path / "train/gpu/model.pt"))
    assert next(model.parameters()).device.type == "cpu"
