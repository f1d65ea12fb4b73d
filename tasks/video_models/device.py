"""Where torch work runs: ``base.device`` (``auto | cpu | cuda | cuda:N``) resolved once per stage.

``auto`` takes CUDA when torch sees a GPU and the CPU otherwise, so the same params file runs
on a laptop and on a GPU box. Asking for CUDA where there is none is an error, not a silent
fallback: a user who wrote ``cuda`` expects the GPU's speed and would otherwise wait for the CPU.

Clips stay uint8 on the CPU (a dataset of them is the largest tensor a stage holds); a batch is
moved, pinned and non-blocking, when it is used. Models are saved from the CPU, so a checkpoint
written on a GPU loads anywhere.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterator

import torch

from tasks.core.errors import PrivharError

DEVICE_PATTERN = r"auto|cpu|cuda(:\d+)?"  # as BaseParams.device checks it


def resolve_device(spec: str, what: str = "base.device") -> torch.device:
    """The torch device ``spec`` names; ``auto`` is the first GPU when there is one (``what``: the setting, for errors)."""
    if not re.fullmatch(DEVICE_PATTERN, spec):
        raise PrivharError(f"{what} = {spec!r} is invalid: expected auto, cpu, cuda or cuda:N")
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(spec)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise PrivharError(
                f"{what} = {spec!r}: torch sees no CUDA GPU here "
                f"(torch {torch.__version__}); use auto or cpu"
            )
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise PrivharError(
                f"{what} = {spec!r}: this machine has {torch.cuda.device_count()} CUDA GPU(s)"
            )
        torch.backends.cudnn.benchmark = (
            True  # fixed clip shapes: cuDNN picks its fastest kernels once
        )
    return device


def to_device(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``tensor`` on ``device``; from the CPU to a GPU through pinned memory, without blocking the host."""
    if tensor.device == device:
        return tensor
    if device.type == "cuda" and tensor.device.type == "cpu":
        return tensor.pin_memory().to(device, non_blocking=True)
    return tensor.to(device)


@contextlib.contextmanager
def mixed_precision(device: torch.device) -> Iterator[None]:
    """bf16 autocast on a GPU for non-private training and evaluation; a no-op on the CPU.

    Never used around DP-SGD's per-sample gradients and clipping, which stay in float32: the
    clipping bound is what the privacy proof assumes, and bf16's 8-bit mantissa would blur it.
    """
    if device.type == "cuda":
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
            yield
    else:
        yield


def synchronise(device: torch.device) -> None:
    """Wait for ``device``'s queued work (GPU kernels run asynchronously): a timing must include it."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def matmul_gflops(
    device: torch.device, size: int = 4096, repeats: int = 6, dtype: torch.dtype = torch.float32
) -> float:
    """``device``'s own measured GEMM rate (warm-up excluded): the yardstick a benchmark's timings are divided by.

    On a GPU, float32 matmuls may use TF32 when ``torch.backends.cuda.matmul.allow_tf32`` is set; the
    benchmark records that setting beside the rate.
    """
    if device.type == "cpu":
        size = min(size, 2048)  # 2 × 2048³ flops: about a second on a small CPU
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    for _ in range(2):
        a @ b
    synchronise(device)
    started = time.perf_counter()
    for _ in range(repeats):
        a @ b
    synchronise(device)
    return repeats * 2 * size**3 / (time.perf_counter() - started) / 1e9


def stamp(device: torch.device) -> dict[str, object]:
    """What a benchmark was measured on, and that device's matmul rate measured in the same run."""
    return {
        **describe(device),
        "matmul_gflops_float32": round(matmul_gflops(device), 1),
        "tf32_matmul": bool(torch.backends.cuda.matmul.allow_tf32),
    }


def describe(device: torch.device) -> dict[str, object]:
    """Name, memory and versions of ``device``: what a timing was measured on."""
    info: dict[str, object] = {
        "device": str(device),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "threads": torch.get_num_threads(),
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info.update(
            name=props.name,
            memory_gib=round(props.total_memory / 2**30, 1),
            capability=f"{props.major}.{props.minor}",
        )
    else:
        import platform

        info.update(name=platform.processor() or platform.machine(), memory_gib=_host_memory_gib())
    return info


def _host_memory_gib() -> float:
    import os

    return round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
