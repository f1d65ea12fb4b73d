"""Make ``import torchvision`` work on this machine's CPU-only torch.

Why: the only torchvision wheel that keeps ``torch==2.13.0`` (0.28.0 on PyPI) is a CUDA
build. Its compiled extension ``torchvision/_C.so`` cannot load next to CPU torch, so the
operators it would register (``torchvision::nms``, ``torchvision::qnms``) do not exist, and
``torchvision/_meta_registrations.py`` fails at import with
``operator torchvision::nms does not exist``. pytorchvideo imports torchvision, so every
model in this project depends on the fix.

What: before torchvision is imported, try to load its extension; only if that fails,
declare the two operator schemas with :mod:`torch.library` and give them a real CPU kernel
(greedy non-maximum suppression, the same algorithm as torchvision's C++ kernel). Nothing
else of torchvision's compiled ops is replaced; ops this project does not use (roi_align,
deform_conv2d ...) stay unavailable, as they are on any build without the extension.

Import this module before anything that imports torchvision: each module of ``tasks/core`` that imports torchvision
or pytorchvideo does, first (``tasks/__init__.py`` does not, so that a command that needs no torch starts without it).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch

_SCHEMA = "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor"


def _extension_loads() -> bool:
    """True when torchvision's own compiled extension can be loaded here."""
    spec = importlib.util.find_spec("torchvision")
    if spec is None or spec.origin is None:
        return False
    for library in Path(spec.origin).parent.glob("_C*.so"):
        try:
            torch.ops.load_library(str(library))
            return True
        except (OSError, RuntimeError):
            return False
    return False


def _operator_exists(name: str) -> bool:
    try:
        getattr(torch.ops.torchvision, name)
        return True
    except (AttributeError, RuntimeError):
        return False


def greedy_nms(dets: torch.Tensor, scores: torch.Tensor, iou_threshold: float) -> torch.Tensor:
    """Indices of boxes kept by greedy NMS, highest score first (torchvision's semantics).

    >>> boxes = torch.tensor([[0., 0., 10., 10.], [1., 1., 11., 11.], [20., 20., 30., 30.]])
    >>> greedy_nms(boxes, torch.tensor([0.9, 0.8, 0.7]), 0.5).tolist()
    [0, 2]
    """
    if dets.numel() == 0:
        return torch.empty(0, dtype=torch.long)
    boxes = dets.float()
    x1, y1, x2, y2 = boxes.unbind(dim=1)
    areas = (x2 - x1).clamp(min=0) * (y2 - y1).clamp(min=0)
    order = scores.float().argsort(descending=True)
    suppressed = torch.zeros(len(boxes), dtype=torch.bool)
    keep = []
    for i in order.tolist():
        if suppressed[i]:
            continue
        keep.append(i)
        width = (torch.minimum(x2[i], x2) - torch.maximum(x1[i], x1)).clamp(min=0)
        height = (torch.minimum(y2[i], y2) - torch.maximum(y1[i], y1)).clamp(min=0)
        intersection = width * height
        iou = intersection / (areas[i] + areas - intersection).clamp(min=1e-12)
        suppressed |= iou > iou_threshold
    return torch.tensor(keep, dtype=torch.long)


def _quantized_nms(dets: torch.Tensor, scores: torch.Tensor, iou_threshold: float) -> torch.Tensor:
    return greedy_nms(dets.dequantize(), scores.dequantize(), iou_threshold)


def install() -> bool:
    """Declare the missing operators; return True if this module had to declare them."""
    if _operator_exists("nms") or _extension_loads():
        return False
    library = torch.library.Library("torchvision", "DEF")  # noqa: TOR901 - owned for the process
    library.define("nms" + _SCHEMA)
    library.define("qnms" + _SCHEMA)
    library.impl("nms", greedy_nms, "CPU")
    library.impl("qnms", _quantized_nms, "QuantizedCPU")
    globals()["_LIBRARY"] = library  # keep the registration alive
    return True


DECLARED_HERE = install()
