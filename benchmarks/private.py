"""``privhar bench private``: seconds per logical batch of non-private SGD, DP-SGD and selective DP-SGD.

One run, one model architecture (privhar's classifier, or ``--backbone``: a model-zoo backbone of
:mod:`tasks.video_models.backbones`, DP-ready, at its own clip unless ``--frames`` / ``--size`` say otherwise), one batch of
clips: (i) non-private SGD on every parameter,
(ii) DP-SGD on every parameter (per-sample gradients, clipping, noise) with each of Opacus's
per-sample gradient modes (``ew``: PyTorch's ExpandedWeights, the pipeline's default; ``hooks``;
``functorch``), (iii) DP-SGD (``ew``) on each selective-tuning subset of
:mod:`tasks.video_models.selective` (paper 003: only θ_t gets per-sample gradients, and backward stops
below the lowest trainable layer when it can).
Each is timed as the median of ``repeats`` steps after ``warmup`` steps. Targets from the issue:
DP-SGD / non-private ≤ 2.5×; full DP / selective DP ≥ 1.9× (003 reports 48 % less runtime).
"""

from __future__ import annotations

import copy
import json
import statistics
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from opacus import PrivacyEngine
from torch.utils.data import DataLoader, TensorDataset

from tasks.core.clip_shapes import OWN, zoo_clip
from tasks.core.storage import atomic_write_bytes
from tasks.video_models.backbones import build_backbone
from tasks.video_models.device import stamp, synchronise
from tasks.video_models.models import create_video_classifier, group_norm
from tasks.video_models.selective import select_trainable, trainable_count

SELECTIVE = ("norms_and_head", "last_stage_and_head", "head")
MODES = ("ew", "hooks", "functorch")  # ew first: the default, and the one the selective runs use


def _median_seconds(step: Any, warmup: int, repeats: int, device: torch.device) -> float:
    for _ in range(warmup):
        step()
    times = []
    for _ in range(repeats):
        synchronise(device)
        started = time.perf_counter()
        step()
        synchronise(device)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def _plain_step(model: torch.nn.Module, clips: torch.Tensor, labels: torch.Tensor) -> Any:
    optimiser = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=1e-3)

    def step() -> None:
        optimiser.zero_grad(set_to_none=True)
        F.cross_entropy(model(clips), labels).backward()
        optimiser.step()

    return step


def _private_step(
    model: torch.nn.Module, clips: torch.Tensor, labels: torch.Tensor, mode: str
) -> tuple[Any, Any]:
    optimiser = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    loader = DataLoader(TensorDataset(clips, labels), batch_size=len(labels))
    private, optimiser, _ = PrivacyEngine(accountant="rdp").make_private(
        module=model,
        optimizer=optimiser,
        data_loader=loader,
        noise_multiplier=1.0,
        max_grad_norm=1.0,
        poisson_sampling=False,
        grad_sample_mode=mode,
    )

    def step() -> None:
        optimiser.zero_grad(set_to_none=True)
        F.cross_entropy(private(clips), labels).backward()
        optimiser.step()

    return step, private


def _private_seconds(
    model: torch.nn.Module,
    clips: torch.Tensor,
    labels: torch.Tensor,
    mode: str,
    warmup: int,
    repeats: int,
    device: torch.device,
) -> float:
    """Median seconds of a DP-SGD step of ``model`` under ``mode``; Opacus's hooks removed afterwards."""
    step, private = _private_step(model, clips, labels, mode)
    seconds = _median_seconds(step, warmup, repeats, device)
    private.remove_hooks()
    return seconds


def _mode_seconds(
    base: torch.nn.Module,
    clips: torch.Tensor,
    labels: torch.Tensor,
    warmup: int,
    repeats: int,
    device: torch.device,
) -> dict[str, float | str]:
    """Median seconds of a full DP-SGD step per Opacus per-sample gradient mode; a mode that cannot take the model
    (a layer it has no per-sample rule for) is recorded with Opacus's reason instead of a time."""
    full: dict[str, float | str] = {}
    for mode in MODES:
        try:
            full[mode] = _private_seconds(
                copy.deepcopy(base), clips, labels, mode, warmup, repeats, device
            )
        except (NotImplementedError, RuntimeError, ValueError) as error:
            full[mode] = f"not supported: {str(error).splitlines()[0][:160]}"
    return full


def _bench_model(
    backbone: str, frames: int, height: int, width: int, model_width: int
) -> tuple[torch.nn.Module, tuple[int, int, int]]:
    """The model a run times, and the clip (frames, height, width) it takes: a backbone's own unless overridden."""
    if backbone == OWN:
        return create_video_classifier(
            num_classes=10, width=model_width, norm=group_norm(16), dropout=0.0
        ), (frames, height, width)
    clip = zoo_clip(backbone, frames or None, height or None)
    return build_backbone(backbone, 10, clip), (clip.frames, *clip.frame_size)


def _selective_seconds(
    base: torch.nn.Module,
    clips: torch.Tensor,
    labels: torch.Tensor,
    warmup: int,
    repeats: int,
    device: torch.device,
    record: dict[str, Any],
) -> dict[str, float]:
    """Median seconds of a DP-SGD step per selective-tuning choice; each choice's trainable count into ``record``."""
    seconds = {}
    for choice in SELECTIVE:
        model = copy.deepcopy(base)
        select_trainable(model, choice)
        seconds[choice] = _private_seconds(model, clips, labels, MODES[0], warmup, repeats, device)
        record[f"dp_sgd_{choice}_trainable_parameters"] = trainable_count(model)
    return seconds


def run_bench(
    *,
    batch: int,
    frames: int,
    height: int,
    width: int,
    model_width: int,
    warmup: int,
    repeats: int,
    out: Path,
    device: torch.device = torch.device("cpu"),
    backbone: str = OWN,
) -> dict[str, Any]:
    """Time the three kinds of step on ``device``; write and return the record (stamped with the device).

    Each time is also given as ``*_matmul_gflop``: seconds × the device's own matmul rate, the work a
    step is worth in GEMM flops, comparable across machines.
    """
    torch.manual_seed(0)
    base, (frames, height, width) = _bench_model(backbone, frames, height, width, model_width)
    base = base.to(device)
    clips = torch.randn(batch, 3, frames, height, width, device=device)
    labels = torch.randint(0, 10, (batch,), device=device)
    machine = stamp(device)
    record: dict[str, Any] = {
        "backbone": backbone,
        "batch": batch,
        "clip": [3, frames, height, width],
        "model_width": model_width if backbone == OWN else None,
        "machine": machine,
        "warmup": warmup,
        "repeats": repeats,
    }
    plain = copy.deepcopy(base)
    record["non_private_seconds"] = _median_seconds(
        _plain_step(plain, clips, labels), warmup, repeats, device
    )
    record["parameters"] = trainable_count(plain)
    full = _mode_seconds(base, clips, labels, warmup, repeats, device)
    seconds = _selective_seconds(base, clips, labels, warmup, repeats, device, record)
    record["dp_sgd_all_trainable_parameters"] = record["parameters"]
    record["dp_sgd_seconds"] = full
    record["dp_sgd_selective_seconds"] = seconds
    timed = {mode: value for mode, value in full.items() if isinstance(value, float)}
    record["dp_over_non_private"] = {
        mode: value / record["non_private_seconds"] for mode, value in timed.items()
    }
    if MODES[0] in timed:
        record["full_dp_over_selective_dp"] = {
            choice: timed[MODES[0]] / seconds[choice] for choice in SELECTIVE
        }
    rate = float(machine["matmul_gflops_float32"])  # type: ignore[arg-type]
    record["non_private_matmul_gflop"] = round(record["non_private_seconds"] * rate, 2)
    record["dp_sgd_matmul_gflop"] = {mode: round(value * rate, 2) for mode, value in timed.items()}
    atomic_write_bytes(out, (json.dumps(record, indent=2) + "\n").encode())
    return record
