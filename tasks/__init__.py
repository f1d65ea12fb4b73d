"""privhar stages: one module per stage, pure functions plus a thin entry point.

The torchvision compatibility shim is imported first so that any later import of
torchvision (directly or through pytorchvideo) works on this CPU-only torch.
"""

from tasks import torchvision_compat  # noqa: F401  (must run before torchvision is imported)
