"""The MLflow model registry: one registered model per training method, ``privhar-<method>``.

Each training run logs its model and registers a new version tagged with the method, its
privacy guarantee (ε, δ, accountant) and dataset. After evaluation the version is described
with its scores and tagged with the ``dvc.lock`` hash and git commit that reproduce it, and
the ``champion`` alias moves to the best Top-1 whose ε meets ``registry.champion_max_epsilon``.

MLflow reserves the alias ``latest``: ``models:/privhar-<method>/latest`` is its own,
always-current pointer to the newest version, so privhar sets no alias of that name.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from torch import nn

from tasks.core.privacy import PrivacyGuarantee
from tasks.core.tracking import StageRun

CHAMPION = "champion"
PREFIX = "privhar-"


def model_name(method: str) -> str:
    return f"{PREFIX}{method}"


def _requirements() -> list[str]:
    from importlib.metadata import version

    return [f"{name}=={version(name)}" for name in ("torch", "torchvision", "pytorchvideo")] + ["privhar"]


def register_model(model: nn.Module, *, method: str, run: StageRun, config: Mapping[str, Any],
                   tags: Mapping[str, Any]) -> str:
    """Log ``model`` to the stage run and register it as a new version; return the version."""
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
    run.set_tags({"privhar.registered_model": name, "privhar.model_version": version})
    return version


def newest_version(method: str) -> Any | None:
    """The newest version of ``privhar-<method>`` (what ``models:/NAME/latest`` resolves to), or None."""
    from mlflow import MlflowClient

    versions = MlflowClient().search_model_versions(f"name = '{model_name(method)}'")
    return max(versions, key=lambda v: int(v.version), default=None)


def record_scores(method: str, scores: Mapping[str, float], provenance: Mapping[str, str],
                  max_epsilon: float) -> str | None:
    """Describe the newest version with its scores and provenance; move ``champion``. Return the version."""
    from mlflow import MlflowClient

    version = newest_version(method)
    if version is None:
        return None
    client = MlflowClient()
    name = model_name(method)
    privacy = PrivacyGuarantee.from_tags(version.tags)
    parts = [f"Top-1 {scores['top1']:.4f}", f"Top-5 {scores['top5']:.4f}"]
    parts += [f"cMAP {scores['cmap']:.4f}"] if "cmap" in scores else []
    description = (f"{', '.join(parts)} on {int(scores['test_videos'])} test videos; "
                   f"ε = {privacy.epsilon:g}, δ = {privacy.delta:g} ({privacy.accountant})")
    client.update_model_version(name, version.version, description=description)
    score_tags = {key: f"{scores[key]:.4f}" for key in ("top1", "top5", "cmap") if key in scores}
    for key, value in {**score_tags, **provenance}.items():
        client.set_model_version_tag(name, version.version, key, value)
    if version.run_id:  # the training run gets its model's scores, so the runs table shows ε beside Top-1
        for key in score_tags:
            client.log_metric(version.run_id, key, float(scores[key]))
    update_champion(method, max_epsilon)
    return str(version.version)


def update_champion(method: str, max_epsilon: float) -> str | None:
    """Point ``champion`` at the best-scoring version within the ε target (newest wins ties)."""
    from mlflow import MlflowClient

    client = MlflowClient()
    name = model_name(method)
    eligible = [v for v in client.search_model_versions(f"name = '{name}'")
                if "top1" in v.tags and PrivacyGuarantee.from_tags(v.tags).within(max_epsilon)]
    if not eligible:
        if CHAMPION in _aliases(client, name):
            client.delete_registered_model_alias(name, CHAMPION)
        return None
    best = max(eligible, key=lambda v: (float(v.tags["top1"]), int(v.version)))
    client.set_registered_model_alias(name, CHAMPION, best.version)
    return str(best.version)


def _aliases(client: Any, name: str) -> dict[str, str]:
    return dict(client.get_registered_model(name).aliases)


@dataclass(frozen=True)
class VersionRow:
    """One line of ``privhar models``."""

    name: str
    version: str
    aliases: tuple[str, ...]
    epsilon: float
    delta: float
    accountant: str
    top1: float | None


def list_versions() -> list[VersionRow]:
    """Every version of every ``privhar-*`` registered model, newest model versions first."""
    from mlflow import MlflowClient

    client = MlflowClient()
    rows = []
    for model in client.search_registered_models(f"name LIKE '{PREFIX}%'"):
        aliases_of: dict[str, list[str]] = {}
        for alias, version in model.aliases.items():
            aliases_of.setdefault(str(version), []).append(alias)
        for version in client.search_model_versions(f"name = '{model.name}'"):
            privacy = PrivacyGuarantee.from_tags(version.tags)
            top1 = float(version.tags["top1"]) if "top1" in version.tags else None
            rows.append(VersionRow(model.name, str(version.version), tuple(sorted(aliases_of.get(str(version.version), []))),
                                   privacy.epsilon, privacy.delta, privacy.accountant, top1))
    return sorted(rows, key=lambda row: (row.name, -int(row.version)))


def format_epsilon(epsilon: float) -> str:
    return "∞" if math.isinf(epsilon) else f"{epsilon:.3g}"
