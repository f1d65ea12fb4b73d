"""The MLflow model registry: one registered model per family of models, ``privhar-<family>``.

A family is a training method (``baseline``, later ``dp_sgd`` …) or a protected dataset the
model learnt from (``dprp``): its versions differ in ε, so the champion of a family is a
privacy-utility choice. Each version is tagged with its model key (the folder under
``data/train``, e.g. ``dprp-eps2.0``; the evaluate stage's metrics are keyed by it), the
method, its privacy guarantee (ε, δ, accountant) and dataset. After evaluation the newest
version of each key is described with its scores and tagged with the ``dvc.lock`` hash and
git commit that reproduce it, and the ``champion`` alias moves to the best mean Top-1 over the
model's training seeds (protocol 1: the raw test videos, the same for every model) whose ε meets
``registry.champion_max_epsilon`` (a family without a finite-ε version has no budget to meet).

Scores reach a version only from an evaluate output that scored *that* model file: each version is
tagged with the SHA-256 of its checkpoint (``checkpoint_sha256``), evaluate writes the digest of every
checkpoint it scored (``scored.json``), and a version whose digest differs — a model trained after the
last evaluate — is left unscored, whatever ``metrics.json`` says.

MLflow reserves the alias ``latest``: ``models:/privhar-<method>/latest`` is its own,
always-current pointer to the newest version, so privhar sets no alias of that name.
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import nn

from tasks.core.guarantee import PrivacyGuarantee
from tasks.core.tracking import StageRun

LOG = logging.getLogger(__name__)
CHAMPION = "champion"
PREFIX = "privhar-"
CHECKPOINT_TAG = "checkpoint_sha256"


def checkpoint_digest(path: Path) -> str:
    """SHA-256 of a saved model file: what ties a registered version to the evaluate output that scored it."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def model_name(family: str) -> str:
    return f"{PREFIX}{family}"


def _requirements() -> list[str]:
    """What pip installs to load a model: the libraries; privhar's own code is in the model (``code_paths``)."""
    from importlib.metadata import version

    return [
        f"{name}=={version(name)}" for name in ("torch", "torchvision", "pytorchvideo", "numpy")
    ]


def fixed_clip(config: Mapping[str, Any]) -> tuple[int, int, int] | None:
    """(T, H, W) a model-zoo backbone's checkpoint takes (its clip: MViT's positional embedding and X3D's head pool
    are sized for it); None for privhar's classifier, which pools globally and takes clips of any length and size."""
    if config.get("backbone", "privhar") == "privhar":
        return None
    height, width = config["input_size"]
    return int(config["clip_frames"]), int(height), int(width)


def clip_signature(classes: int, clip: tuple[int, int, int] | None = None) -> Any:
    """Clips ``(N, 3, T, H, W)`` float32 (normalised frames; T, H and W free unless ``clip`` fixes them) in,
    ``(N, classes)`` logits out."""
    import numpy as np
    from mlflow.models import ModelSignature
    from mlflow.types import Schema, TensorSpec

    return ModelSignature(
        inputs=Schema([TensorSpec(np.dtype(np.float32), (-1, 3, *(clip or (-1, -1, -1))))]),
        outputs=Schema([TensorSpec(np.dtype(np.float32), (-1, classes))]),
    )


def example_clip(clip: tuple[int, int, int] | None = None) -> Any:
    """An input example for the registry's schema view and serving checks: one clip of zeros, 4 frames of 32×40
    where any size is valid (privhar's classifier pools globally), else the backbone's own ``clip``."""
    import numpy as np

    return np.zeros((1, 3, *(clip or (4, 32, 40))), dtype=np.float32)


def register_model(
    model: nn.Module,
    *,
    family: str,
    key: str,
    run: StageRun,
    config: Mapping[str, Any],
    tags: Mapping[str, Any],
    artifact: str | None = None,
) -> str:
    """Log ``model`` to ``run`` (as ``artifact``, by default its key: the logged models of a run are told apart by
    name) and register it as a new version of ``family``; return the version. ``run`` is the active stage run, or a finished model run, resumed for this."""
    import mlflow
    from mlflow import MlflowClient

    name = model_name(family)
    # a video classifier of this project (tests register toy models too)
    clip_model = "num_classes" in config
    with run.resumed():
        # pickle, not pt2: pt2 traces one fixed input shape, while clips of any length and size are valid input.
        # code_paths: the model's classes travel with it, so a fresh environment with torch loads it without privhar.
        info = mlflow.pytorch.log_model(
            model,
            name=artifact or key.replace(".", "_"),
            registered_model_name=name,
            serialization_format="pickle",
            pip_requirements=_requirements(),
            metadata={"privhar_config": dict(config)},
            code_paths=[str(Path(__file__).resolve().parents[1])],
            signature=clip_signature(int(config["num_classes"]), fixed_clip(config))
            if clip_model
            else None,
            input_example=example_clip(fixed_clip(config)) if clip_model else None,
        )
        client = MlflowClient()
        version = str(info.registered_model_version)
        for tag, value in {**tags, "model": key}.items():
            client.set_model_version_tag(name, version, tag, str(value))
        run.set_tags({"privhar.registered_model": name, "privhar.model_version": version})
    return version


def newest_version(key: str) -> Any | None:
    """The newest registered version of the model ``key`` (in whichever family), or None."""
    from mlflow import MlflowClient

    versions = MlflowClient().search_model_versions(
        f"name LIKE '{PREFIX}%' AND tags.model = '{key}'"
    )
    return max(versions, key=lambda v: int(v.version), default=None)  # a key lives in one family


SCORE_TAGS = ("top1", "top5", "top1_protocol2", "top5_protocol2", "cmap", "top1_mean", "top1_ci95")


def describe_scores(scores: Mapping[str, float], privacy: PrivacyGuarantee) -> str:
    """One line for the registry: protocol 1 first (raw test videos), protocol 2 when measured."""
    parts = [f"Top-1 {scores['top1']:.4f}", f"Top-5 {scores['top5']:.4f}"]
    if "top1_ci95" in scores:  # the row's spread over its training seeds (this version is seed 0)
        parts += [
            f"row Top-1 {scores['top1_mean']:.4f} ± {scores['top1_ci95']:.4f} over {int(scores['seeds'])} seeds"
        ]
    parts += (
        [f"protocol 2 Top-1 {scores['top1_protocol2']:.4f}"] if "top1_protocol2" in scores else []
    )
    parts += [f"cMAP {scores['cmap']:.4f}"] if "cmap" in scores else []
    return (
        f"{', '.join(parts)} on {int(scores['test_videos'])} test videos; "
        f"ε = {privacy.epsilon:g}, δ = {privacy.delta:g} ({privacy.accountant})"
    )


def record_scores(
    key: str,
    scores: Mapping[str, float],
    provenance: Mapping[str, str],
    max_epsilon: float,
    scored_digest: str | None,
) -> str | None:
    """Describe the newest version of ``key`` with its scores and provenance; move its family's ``champion``.

    ``scored_digest`` is the checkpoint digest evaluate scored for ``key``: a version of another digest (trained
    after that evaluate, or before versions carried one) is not described, and no alias moves for it.
    """
    from mlflow import MlflowClient

    version = newest_version(key)
    if version is None:
        return None
    if scored_digest is None or version.tags.get(CHECKPOINT_TAG) != scored_digest:
        LOG.warning(
            "registry: %s version %s not scored: the evaluate output is for another model file "
            "(evaluate is out of date; run it to score this version)",
            version.name,
            version.version,
        )
        return None
    client = MlflowClient()
    name = version.name
    privacy = PrivacyGuarantee.from_tags(version.tags)
    client.update_model_version(name, version.version, description=describe_scores(scores, privacy))
    score_tags = {tag: f"{scores[tag]:.4f}" for tag in SCORE_TAGS if tag in scores}
    for tag, value in {**score_tags, **provenance}.items():
        client.set_model_version_tag(name, version.version, tag, value)
    # the training run gets its model's scores, so the runs table shows ε beside Top-1
    if version.run_id:
        for tag in score_tags:
            client.log_metric(version.run_id, tag, float(scores[tag]))
    update_champion(name.removeprefix(PREFIX), max_epsilon)
    return str(version.version)


def _mean_top1(version: Any) -> float:
    """The version's Top-1 over its training seeds (``top1_mean``), its own Top-1 where it was trained once."""
    return float(version.tags.get("top1_mean", version.tags["top1"]))


def update_champion(family: str, max_epsilon: float) -> str | None:
    """Point ``champion`` at the family's version of best mean Top-1 over seeds within the ε target (newest wins
    ties). A family with no finite-ε version (the non-private baseline, a protected copy's classifier) has no target
    to meet: its best version is its champion; a DP family's ε = ∞ reference rows never are, under a finite target."""
    from mlflow import MlflowClient

    client = MlflowClient()
    name = model_name(family)
    scored = [v for v in client.search_model_versions(f"name = '{name}'") if "top1" in v.tags]
    dp_family = any(math.isfinite(PrivacyGuarantee.from_tags(v.tags).epsilon) for v in scored)
    eligible = [
        v for v in scored if not dp_family or PrivacyGuarantee.from_tags(v.tags).within(max_epsilon)
    ]
    if not eligible:
        if CHAMPION in _aliases(client, name):
            client.delete_registered_model_alias(name, CHAMPION)
        return None
    best = max(eligible, key=lambda v: (_mean_top1(v), int(v.version)))
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
    top1: float | None  # seed 0's, the registered model's
    unit: str = "none"
    top1_mean: float | None = (
        None  # the row's over its training seeds: what the champion is chosen by
    )
    top1_ci95: float | None = None
    epsilon_audited: float | None = None
    epsilon_audited_fdp: float | None = None  # the f-DP bound of the same audit, where it applies

    def top1_shown(self) -> str:
        """The Top-1 the champion was chosen by: the row's mean ± its 95 % interval over seeds, else seed 0's."""
        if self.top1_mean is not None and self.top1_ci95 is not None:
            return f"{self.top1_mean:.4f} ± {self.top1_ci95:.4f}"
        return f"{self.top1:.4f}" if self.top1 is not None else "-"


def _tag(tags: dict[str, str], key: str) -> float | None:
    return float(tags[key]) if tags.get(key, "") != "" else None


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
            tags = version.tags
            rows.append(
                VersionRow(
                    model.name,
                    str(version.version),
                    tuple(sorted(aliases_of.get(str(version.version), []))),
                    privacy.epsilon,
                    privacy.delta,
                    privacy.accountant,
                    _tag(tags, "top1"),
                    privacy.unit,
                    _tag(tags, "top1_mean"),
                    _tag(tags, "top1_ci95"),
                    _tag(tags, "epsilon_audited"),
                    _tag(tags, "epsilon_audited_fdp"),
                )
            )
    return sorted(rows, key=lambda row: (row.name, -int(row.version)))


def format_epsilon(epsilon: float) -> str:
    return "∞" if math.isinf(epsilon) else f"{epsilon:.3g}"
