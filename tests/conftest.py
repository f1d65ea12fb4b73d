"""Shared fixtures: tiny params files, an isolated MLflow store, tiny synthetic datasets."""

from __future__ import annotations

import atexit
import contextlib
import copy
import functools
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from flows.profiles import overlay_in_place

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

# make install leaves the venv without bytecode (Python writes it on first import). Under PYTHONDONTWRITEBYTECODE
# (this machine's shells set it; make unsets it) nothing is ever written, and every process a test starts compiles
# torch again: 5.4 s to import it, not 2.8 s (2026-11-29). The tests' processes write it, however pytest was started.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False


def share_the_cores() -> None:
    """Under pytest-xdist, each worker's share of the cores for torch's, OpenMP's and BLAS's threads, here and in every
    process a test starts (a stage reads its share from PRIVHAR_STAGE_CORES). Two processes of two OpenMP threads each
    on this machine's two cores ran a small conv3d training 4.4x slower than one thread each (17.4 s against 4.0 s,
    2026-11-30): their threads spin while they wait for each other. A variable already set is kept."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers <= 1:
        return
    from threadpoolctl import threadpool_limits

    from tasks.core.parallel import STAGE_CORES_ENV, stage_cores, use_stage_cores

    os.environ.setdefault(STAGE_CORES_ENV, str(max(1, (os.cpu_count() or 1) // workers)))
    use_stage_cores()  # as a stage does: OMP_NUM_THREADS and the BLAS variables, read when torch loads
    threadpool_limits(
        stage_cores()
    )  # the BLAS numpy loaded before this conftest (a plugin imports it)


share_the_cores()

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
    "train": {
        "epochs": 2,
        "epochs_per_family": {
            "baseline": 2,
            "anonymize": 2,
            "dprp": 2,
        },  # the tiny data's, every family
        "batch_size": 4,
        "input_size": [32, 40],
        "width": 4,
    },
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
        "audit_canaries": 1000,  # the tiny runs' audits: 2 000 (params.yaml) doubled the private stage tests' time
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
        "audit_canaries": 24,  # batches of 4: canaries past the room add steps, each a clip's pass in full tuning
        "seeds_per_tuning": {"selective": None, "full": None},
        "reference_seeds": {"full": None},
    },
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


def sections(params_path: Path, **names: str) -> dict[str, Any]:
    """Keyword arguments of a stage: each argument's typed section of ``params_path`` (as the command layer reads it)."""
    from flows.stage_readers import section

    return {argument: section(params_path, name) for argument, name in names.items()}


def check_budget_at(params_path: Path, release: str, rows: list[dict[str, Any]]) -> None:
    """check_budget as a DP stage run on its own calls it: against the plan derived from ``params_path``."""
    from tasks.core.params_files import load_plan
    from tasks.privacy.budget import check_budget, derived_plan

    params = load_plan(params_path)
    check_budget(params.privacy, release, rows, derived_plan(params))


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


# tryfirst: before xdist's own hook, which reads the group marks (the group needs pytest<9.2: pyproject.toml)
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark ``pipeline`` every test that reads the session's whole-pipeline run, so that ``-m 'not pipeline'`` runs
    the rest of the suite without it (docs/operations.md: the layers of the suite); under pytest-xdist's
    ``--dist loadgroup`` they go to one worker, which makes the run once. The tests that share a module fixture go
    to one worker too: spread over both, each worker built the fixture (a project, a trained model) for itself, and
    a test that read what another test left in it failed on the other worker."""
    for item in items:
        if "pipeline_run" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.pipeline)
            item.add_marker(pytest.mark.xdist_group("pipeline"))
        elif item.get_closest_marker("xdist_group") is None and uses_a_module_fixture(item):
            item.add_marker(pytest.mark.xdist_group(item.module.__name__))


def uses_a_module_fixture(item: pytest.Item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    return info is not None and any(
        definition.scope == "module"
        for definitions in info.name2fixturedefs.values()
        for definition in definitions
    )


@functools.cache
def _migrated_mlflow_store() -> Path:
    """An empty MLflow SQLite store, made once per worker: MLflow builds its schema with some 50 alembic migrations, about
    5 s of every new store (2026-11-30)."""
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    folder = Path(tempfile.mkdtemp(prefix="privhar-empty-mlflow-"))
    atexit.register(shutil.rmtree, folder, True)
    SqlAlchemyStore(f"sqlite:///{folder / 'mlflow.db'}", (folder / "artifacts").as_uri())
    return folder / "mlflow.db"


def fresh_mlflow_store(folder: Path) -> str:
    """A new, empty MLflow store at ``folder``/mlflow.db (a copy of the migrated one); its URI. The suite's one
    whole-pipeline run makes its own, as `make run` does."""
    shutil.copy(_migrated_mlflow_store(), folder / "mlflow.db")
    return f"sqlite:///{folder / 'mlflow.db'}"


@pytest.fixture(scope="session", autouse=True)
def prefect_temporary_server_stopped() -> Iterator[None]:
    """A Prefect temporary server a test started is stopped while pytest still holds its output: left to its atexit
    hook, it logged "Stopping temporary server" to a closed stream and printed a logging traceback at the suite's end
    (Prefect issues #14845, #16626)."""
    import sys

    yield
    if "prefect.server.api.server" in sys.modules:  # only where a test imported it
        from prefect.server.api.server import SubprocessASGIServer

        for server in list(SubprocessASGIServer._instances.values()):
            server.stop()


@pytest.fixture(scope="session", autouse=True)
def mlflow_store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Every test logs to one throw-away SQLite MLflow store, never the project's."""
    import os

    uri = fresh_mlflow_store(tmp_path_factory.mktemp("mlflow"))
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
    from flows.stage_commands import stage_call

    synthesize = stage_call("synthesize")

    folder = tmp_path_factory.mktemp("tiny")
    synthesize(params_path=write_params(folder), out=folder / "data" / "synthesize")
    return folder


@pytest.fixture(scope="session")
def tiny_decoded(tiny_synthetic: Path) -> Path:
    from flows.stage_commands import stage_call

    decode = stage_call("decode")

    decode(
        params_path=tiny_synthetic / "params.yaml",
        source=tiny_synthetic / "data" / "synthesize",
        out=tiny_synthetic / "data" / "decode",
    )
    return tiny_synthetic


@pytest.fixture(scope="session")
def tiny_public(tiny_synthetic: Path) -> Path:
    """The tiny public set (other people, other scenes), decoded: data/public/decode beside the tiny dataset."""
    from flows.stage_commands import stage_call

    decode = stage_call("decode")
    synthesize = stage_call("synthesize")

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


@functools.cache
def _empty_project() -> Path:
    """An empty git + DVC repository, made once per session (``dvc init`` takes seconds) and copied by make_project."""
    folder = Path(tempfile.mkdtemp(prefix="privhar-empty-project-"))
    atexit.register(shutil.rmtree, folder, True)
    sh("git", "init", "-q", cwd=folder)
    sh("git", "config", "user.email", "ci@privhar.invalid", cwd=folder)
    sh("git", "config", "user.name", "privhar ci", cwd=folder)
    sh("dvc", "init", "-q", cwd=folder)
    return folder


def make_project(folder: Path, overrides: dict[str, Any] | None = None) -> Path:
    """A fresh git + DVC project holding this repository's pipeline with tiny params."""
    shutil.copytree(_empty_project(), folder, dirs_exist_ok=True)
    shutil.copy(REPO / "dvc.yaml", folder / "dvc.yaml")
    shutil.copytree(REPO / ".dvc" / "plots", folder / ".dvc" / "plots")  # dvc.yaml's plot templates
    shutil.copytree(REPO / "tasks", folder / "tasks", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "profiles", folder / "profiles")
    write_params(folder, {**DAG, **(overrides or {})})
    (folder / ".gitignore").write_text(".prefect/\n.privhar/\n.mlflow-ui/\n")
    sh("git", "add", "-A", cwd=folder)
    sh("git", "commit", "-qm", "tiny project", cwd=folder)
    return folder


@contextlib.contextmanager
def prefect_api_on(project: Path) -> Iterator[str]:
    """A real Prefect server on ``project``'s database (``.prefect/``), on a free loopback port, as ``privhar serve``
    starts it: this process and the commands it starts (stages, Dask workers) talk to it until the block ends."""
    from flows.prefect_server import prefect_environment, prefect_server
    from flows.servers import free_port

    port = free_port()
    server = prefect_server(project, "127.0.0.1", port)
    server.start()
    env = prefect_environment(project, "127.0.0.1", port)
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


@pytest.fixture(scope="session")
def prefect_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One Prefect server of the session, on a database of its own (the stage-level flow tests)."""
    with prefect_api_on(tmp_path_factory.mktemp("prefect")) as url:
        yield url


@dataclass(frozen=True)
class PipelineRun:
    """The suite's one whole-pipeline run: its project (DVC outputs, ``.prefect/`` database), its MLflow store and
    what ``privhar flow`` printed."""

    project: Path
    mlflow_uri: str
    stdout: str
    stderr: str

    @property
    def env(self) -> dict[str, str]:
        """The environment its commands ran in: this environment's tools, its MLflow store, no Prefect server of the
        session's (``privhar flow`` uses the project's own database)."""
        env = {key: value for key, value in os.environ.items() if not key.startswith("PREFECT_")}
        return {
            **env,
            "MLFLOW_TRACKING_URI": self.mlflow_uri,
            "PATH": f"{BIN}{os.pathsep}{env['PATH']}",
        }


@pytest.fixture(scope="session")
def pipeline_run(tmp_path_factory: pytest.TempPathFactory) -> PipelineRun:
    """``privhar flow`` (the command ``make run`` runs) once over the tiny 23-stage project (``DAG``): every end-to-end,
    registry, orchestration and browser assertion reads this run; error paths use ``small_project``.

    Its MLflow store is its own, so that no other test's model becomes a champion it reports."""
    project = make_project(tmp_path_factory.mktemp("pipeline"))
    uri = f"sqlite:///{project / 'mlflow.db'}"
    run = PipelineRun(project, uri, "", "")
    result = subprocess.run(
        [str(BIN / "privhar"), "flow"],
        cwd=project,
        capture_output=True,
        text=True,
        env=run.env,
        timeout=1800,
    )
    assert result.returncode == 0, (
        f"privhar flow failed:\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}"
    )
    return PipelineRun(project, uri, result.stdout, result.stderr)


# The error paths' project: the stages up to train (code, scan, synthesize, decode, the public set, pretrain, train)
SMALL_DAG = {"orchestrate": {"stages": ["train"]}}


@pytest.fixture
def small_project(tmp_path: Path) -> Path:
    """A fresh tiny project whose runs stop at train: 8 stages, not 23 (killed stages, refused runs, bad params)."""
    return make_project(tmp_path, SMALL_DAG)
