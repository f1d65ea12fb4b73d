"""Stage ``register``: score the MLflow model registry from the evaluation, whichever runner ran the DAG.

    reports/evaluate/metrics.json ─┐  Top-1 (both protocols, the seeds' interval)
    reports/report/metrics.json ───┼─▶ each registered model's newest version: description, score tags,
    reports/evaluate/scored.json ──┘   provenance (git commit, dvc.lock); the family's ``champion`` alias
                                       out: registered.json {model key: {version, checkpoint_sha256}}

A stage (not a step of the flow), so a plain ``dvc repro`` or ``dvc exp run`` scores the registry too.
Only the model files evaluate scored are described (``scored.json`` holds each file's SHA-256): a version
trained after that evaluate is left unscored and moves no alias (tasks/video_models/model_registry.py).
"""

from __future__ import annotations

import hashlib
import json
import logging
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any

from tasks.core import stage_options as arg
from tasks.core.errors import PrivharError
from tasks.core.params import RegistryParams
from tasks.core.seeds import base_key
from tasks.core.storage import atomic_write_bytes
from tasks.core.tracking import stage_run, stage_work
from tasks.video_models.model_registry import record_scores

LOG = logging.getLogger(__name__)


def _json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise PrivharError(f"{path}: not found; run the stage that writes it first") from None
    except (OSError, json.JSONDecodeError) as error:
        raise PrivharError(f"{path}: cannot be read as JSON ({error})") from None


def merge_scores(contents: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """``{model key: {metric: value}}`` merged over metrics files' contents (evaluate's Top-1, the report's cMAP / F1);
    entries without a ``top1`` (other metrics) are left out."""
    merged: dict[str, dict[str, float]] = {}
    for content in contents:
        for key, values in content.items():
            if isinstance(values, dict) and "top1" in values:
                merged.setdefault(key, {}).update(values)
    return merged


def model_scores(paths: Sequence[Path]) -> dict[str, dict[str, float]]:
    """:func:`merge_scores` of the metrics files at ``paths``."""
    return merge_scores(_json(path) for path in paths)


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "none"


def git_commit(project: Path) -> str:
    """HEAD's commit, the one the code came from; ``none`` outside git."""
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=project, capture_output=True, text=True, check=False
    )
    return head.stdout.strip() if head.returncode == 0 else "none"


MODIFIED_SHOWN = 20  # modified paths a version's tag names


def git_modified(project: Path) -> str:
    """The tracked files that differ from HEAD, apart from the commit (issue 82: every version's commit ended in
    ``+dirty`` after a clean clone's run, which writes its own tracked reports and dvc.lock): ``none`` if none."""
    listed = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"],
        cwd=project,
        capture_output=True,
        text=True,
        check=False,
    ).stdout.splitlines()
    paths = sorted(line[3:] for line in listed if line.strip())
    more = f" and {len(paths) - MODIFIED_SHOWN} more" if len(paths) > MODIFIED_SHOWN else ""
    return ", ".join(paths[:MODIFIED_SHOWN]) + more if paths else "none"


@stage_work
def register(
    *,
    registry: RegistryParams,
    project: Path,
    metrics: Annotated[
        Sequence[Path],
        arg.file(
            "A metrics.json of model scores (evaluate's Top-1, the report's cMAP / F1); repeat for several."
        ),
    ],
    scored: Annotated[
        Path, arg.file("evaluate's scored.json: the SHA-256 of each model file it scored.")
    ],
    out: Annotated[
        Path, arg.file("Where to write registered.json (model key: version described).", "output")
    ],
) -> dict[str, dict[str, Any]]:
    """Describe every registered model (seed 0) evaluate scored; write and return ``{key: {version, digest}}``.
    ``project``: the DVC project's folder (its dvc.lock and git commit are each version's provenance)."""
    scores = model_scores(metrics)
    digests = _json(scored)
    project = project.resolve()
    provenance = {
        "dvc_lock_sha256": file_sha256(project / "dvc.lock"),
        "git_commit": git_commit(project),
        "git_modified": git_modified(project),
    }
    registered: dict[str, dict[str, Any]] = {}
    with stage_run("register", {"registry": registry}) as run:
        for key, values in sorted(scores.items()):
            if base_key(key)[1] != 0:
                continue  # training seeds i >= 1 are not registered: their scores make the row's interval
            version = record_scores(
                key, values, provenance, registry.champion_max_epsilon, digests.get(key)
            )
            registered[key] = {"version": version, "checkpoint_sha256": digests.get(key)}
        # the scores as one artifact, not a metric per model and score (hundreds of one-bar charts)
        run.log_dict(scores, "scores.json")
        described = sum(entry["version"] is not None for entry in registered.values())
        run.log_summary({"versions_described": described, "models_scored": len(scores)})
        atomic_write_bytes(out, (json.dumps(registered, indent=2, sort_keys=True) + "\n").encode())
    LOG.info(
        "register: %d of %d models' newest versions described and scored (champion within ε ≤ %g)",
        described,
        len(registered),
        registry.champion_max_epsilon,
    )
    return registered
