"""Shared fixtures: tiny params files, an isolated MLflow store, tiny synthetic datasets."""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from flows.profiles import overlay_in_place

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

TINY = {
    "base": {"workers": 2},
    "synthesize": {
        "actions": ["walk", "wave", "squat"],
        "identities": 4,
        "videos_per_action": 4,
        "frames": 12,
        "fps": 12.0,
        "frame_size": [72, 96],
        "scenes": 2,
        "two_person_fraction": 0.25,
    },
    "decode": {"fps": 6.0, "frames": 4, "frame_size": [32, 40]},
    "train": {"epochs": 2, "batch_size": 4, "input_size": [32, 40], "width": 4},
    "evaluate": {"batch_size": 8},
    "public": {"identities": 4, "videos_per_action": 4, "epochs": 1},
    "private": {
        "epsilons": [2.0],
        "epochs": 2,
        "batch_size": 4,
        "physical_batch_size": 3,
        "clips_per_video": 2,
        "public_size": {"video": None, "person": None},  # the tiny splits' own counts
        "seeds": None,
        "seeds_at_epsilon": {0.5: None, 1.0: None, 2.0: None},
    },  # report.seeds
    "assess": {
        "attacker_epochs": 2,
        "attacker_frame_step": 2,
        "tracking_videos": 2,
        "residual_videos": 2,
        "fused_pairs_per_person": 3,
        "detector_training_frame_step": 2,
        "detection_frame_step": 2,
    },
    "ldp": {
        "repetitions": 2,
        "digits_epsilons": [0.5, 4.0, float("inf")],
        "video_first_filters": 2,
        "video_second_filters": 2,
        "video_crop": [16, 8],
        "video_epsilons": [1.0, float("inf")],
    },
    "federated": {
        "clients": 2,
        "rounds": 2,
        "batch_size": 4,
        "learning_rate": 0.1,
        "seeds_per_tuning": {"selective": None, "full": None},
        "reference_seeds": {"full": None},
    },
    "orchestrate": {"shard_size": 8, "local_workers": 2},
    "report": {
        "seeds": 1,
        "seeds_per_family": {"dprp": None},
    },  # stage tests train one seed; the pipeline projects (DAG) two
}


# What Video-DPRP promises across thread counts and CPUs (docs/pipeline.md): the same frames, except that a
# pixel whose exact float64 value lies within rounding of a half grey level may land one level away.
# Measured: 0 of 11.8 M pixels moved (1 / 2 threads, AVX-512 / AVX2 / SSE4.2); the bound allows 1 in 10^6.
MOVED_PIXEL_SHARE = 1e-6


def assert_frames_agree(first, second, what: str = "frames") -> None:
    """Two uint8 clips of the same shape within Video-DPRP's cross-machine promise (``MOVED_PIXEL_SHARE``)."""
    import numpy as np

    assert first.shape == second.shape and first.dtype == second.dtype == np.uint8, what
    moved = np.abs(first.astype(np.int16) - second.astype(np.int16))
    assert moved.max(initial=0) <= 1, f"{what}: a pixel moved {moved.max()} grey levels"
    assert (moved > 0).sum() <= MOVED_PIXEL_SHARE * moved.size, (
        f"{what}: {(moved > 0).sum()} of {moved.size} pixels moved"
    )


# The pipeline projects keep one stage per kind (stage-level tests cover every method): 23 stages, not 35.
DAG = {
    "train": {"epochs": 1},
    "dprp": {"epsilons": [8.0]},
    "anonymize": {"methods": ["avatar", "blackout"]},
    "private": {"methods": ["dp_sgd", "maskdp"]},
    "federated": {"aggregations": ["fedavg"], "rounds": 1},
    "report": {"seeds": 2},
}


def write_params(folder: Path, overrides: dict[str, Any] | None = None) -> Path:
    """The repository's params.yaml shrunk to TINY, with ``overrides`` on top."""
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    overlay_in_place(params, copy.deepcopy(TINY))
    overlay_in_place(params, overrides or {})
    if "budget" not in (overrides or {}).get(
        "privacy", {}
    ):  # each test its own persistent budget (one MLflow store)
        params["privacy"]["budget"] = f"test-{folder.name}"
    path = folder / "params.yaml"
    path.write_text(yaml.safe_dump(params, sort_keys=False))
    return path


@pytest.fixture(scope="session", autouse=True)
def mlflow_store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Every test logs to one throw-away SQLite MLflow store, never the project's."""
    import os

    folder = tmp_path_factory.mktemp("mlflow")
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    os.environ["MLFLOW_TRACKING_URI"] = uri
    os.environ["PRIVHAR_EXPERIMENT"] = "privhar-tests"
    os.environ["PRIVHAR_CACHE_DIR"] = str(
        tmp_path_factory.mktemp("cache")
    )  # the accountants' disk cache, fresh per session
    os.environ.pop("PRIVHAR_PARENT_RUN_ID", None)
    return uri


@pytest.fixture(scope="session")
def tiny_synthetic(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny synthesized dataset (session-wide: several test modules read it)."""
    from tasks.synthesize import synthesize

    folder = tmp_path_factory.mktemp("tiny")
    synthesize(params_path=write_params(folder), out=folder / "data" / "synthesize")
    return folder


@pytest.fixture(scope="session")
def tiny_decoded(tiny_synthetic: Path) -> Path:
    from tasks.decode import decode

    decode(
        params_path=tiny_synthetic / "params.yaml",
        source=tiny_synthetic / "data" / "synthesize",
        out=tiny_synthetic / "data" / "decode",
    )
    return tiny_synthetic


@pytest.fixture(scope="session")
def tiny_public(tiny_synthetic: Path) -> Path:
    """The tiny public set (other people, other scenes), decoded: data/public/decode beside the tiny dataset."""
    from tasks.decode import decode
    from tasks.synthesize import synthesize

    params = tiny_synthetic / "params.yaml"
    synthesize(
        params_path=params, out=tiny_synthetic / "data" / "public" / "synthesize", public=True
    )
    decode(
        params_path=params,
        source=tiny_synthetic / "data" / "public" / "synthesize",
        out=tiny_synthetic / "data" / "public" / "decode",
    )
    return tiny_synthetic / "data" / "public" / "decode"


def sh(*args: str, cwd: Path, timeout: float = 900) -> subprocess.CompletedProcess:
    """Run a command of this environment; fail the test with its output if it fails."""
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    result = subprocess.run(
        list(args), cwd=cwd, capture_output=True, text=True, env=env, timeout=timeout
    )
    assert result.returncode == 0, (
        f"{' '.join(args)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    )
    return result


def make_project(folder: Path, overrides: dict[str, Any] | None = None) -> Path:
    """A fresh git + DVC project holding this repository's pipeline with tiny params."""
    shutil.copy(REPO / "dvc.yaml", folder / "dvc.yaml")
    shutil.copytree(REPO / "tasks", folder / "tasks", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "profiles", folder / "profiles")
    write_params(folder, {**DAG, **(overrides or {})})
    (folder / ".gitignore").write_text(".prefect/\n.privhar/\n.mlflow-ui/\n")
    sh("git", "init", "-q", cwd=folder)
    sh("git", "config", "user.email", "ci@privhar.invalid", cwd=folder)
    sh("git", "config", "user.name", "privhar ci", cwd=folder)
    sh("dvc", "init", "-q", cwd=folder)
    sh("git", "add", "-A", cwd=folder)
    sh("git", "commit", "-qm", "tiny project", cwd=folder)
    return folder


@pytest.fixture(scope="session")
def prefect_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One real Prefect server on a free loopback port for the session (as ``privhar serve`` starts it)."""
    from flows.prefect_server import prefect_environment, prefect_server
    from flows.servers import free_port

    home = tmp_path_factory.mktemp("prefect")
    port = free_port()
    server = prefect_server(home, "127.0.0.1", port)
    server.start()
    env = prefect_environment(home, "127.0.0.1", port)
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)  # for stage subprocesses and Dask workers
    from prefect.settings import (
        PREFECT_API_URL,
        PREFECT_SERVER_ANALYTICS_ENABLED,
        temporary_settings,
    )

    try:
        with temporary_settings(
            {PREFECT_API_URL: env["PREFECT_API_URL"], PREFECT_SERVER_ANALYTICS_ENABLED: False}
        ):
            yield env["PREFECT_API_URL"]
    finally:
        server.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
