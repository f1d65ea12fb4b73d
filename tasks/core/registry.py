"""The MLflow model registry: one registered model per training method, ``privhar-<method>``.

Each training run logs its model and registers a new version, tagged with what produced
it, and moves the ``newest`` alias to it (aliases, never the deprecated stages).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import nn

from tasks.core.tracking import StageRun

# MLflow reserves the alias "latest" (models:/NAME/latest already means the newest version).
NEWEST = "newest"


def model_name(method: str) -> str:
    return f"privhar-{method}"


def _requirements() -> list[str]:
    from importlib.metadata import version

    return [f"{name}=={version(name)}" for name in ("torch", "torchvision", "pytorchvideo")] + ["privhar"]


def register_model(model: nn.Module, *, method: str, run: StageRun, config: Mapping[str, Any],
                   tags: Mapping[str, Any]) -> str:
    """Log ``model`` to the stage run, register it as a new version; return the version."""
    import mlflow
    from mlflow import MlflowClient

    name = model_name(method)
    # pickle, not pt2: pt2 traces one fixed input shape, while clips of any length and size are valid input.
    info = mlflow.pytorch.log_model(model, name="model", registered_model_name=name, serialization_format="pickle",
                                    pip_requirements=_requirements(), metadata={"privhar_config": dict(config)})
    client = MlflowClient()
    version = str(info.registered_model_version)
    for key, value in tags.items():
        client.set_model_version_tag(name, version, key, str(value))
    client.set_registered_model_alias(name, NEWEST, version)
    run.set_tags({"privhar.registered_model": name, "privhar.model_version": version})
    return version


def describe_newest(method: str, description: str, tags: Mapping[str, Any]) -> str | None:
    """Describe and tag the version the ``newest`` alias points to (None if none is registered)."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    client = MlflowClient()
    name = model_name(method)
    try:
        version = client.get_model_version_by_alias(name, NEWEST).version
    except MlflowException:
        return None
    client.update_model_version(name, version, description=description)
    for key, value in tags.items():
        client.set_model_version_tag(name, version, key, str(value))
    return str(version)


def record_scores(method: str, scores: Mapping[str, float]) -> str | None:
    """Describe and tag the newest version of ``privhar-<method>`` with its test scores."""
    description = f"Top-1 {scores['top1']:.4f}, Top-5 {scores['top5']:.4f} on {int(scores['test_videos'])} test videos"
    return describe_newest(method, description, {"top1": f"{scores['top1']:.4f}", "top5": f"{scores['top5']:.4f}"})
