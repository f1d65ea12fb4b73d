"""The warm stage server (flows/stage_server.py): a forked stage behaves as a cold one, and nothing outlives its run."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flows.launch import SERVER_ENV, run_on_server
from tests.conftest import BIN, write_params


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    """A stage server, as ``privhar run`` starts one; yields (address, its process)."""
    folder = tmp_path_factory.mktemp("server")
    address = str(folder / "stage.sock")
    process = subprocess.Popen(
        [sys.executable, "-m", "flows.stage_server", address], cwd=folder, stdin=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 30
    while not os.path.exists(address) and time.monotonic() < deadline:
        time.sleep(0.05)
    yield address, process
    process.terminate()
    process.wait(timeout=30)


def stages_of(server_process: subprocess.Popen) -> list[int]:
    """The stages (forked children) the server runs now."""
    children = (
        Path(f"/proc/{server_process.pid}/task/{server_process.pid}/children").read_text().split()
    )
    return [int(pid) for pid in children]


def digests(folder: Path) -> dict[str, str]:
    return {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def test_a_forked_stage_writes_what_a_cold_one_writes(server, tmp_path, capfd):
    address, _ = server
    params = write_params(tmp_path)
    argv = ["privhar", "stage", "synthesize", "--params", str(params), "--out"]
    assert run_on_server(address, [*argv, str(tmp_path / "warm")]) == 0
    assert (
        "synthesize: 12 videos" in capfd.readouterr().err
    )  # the stage's own stderr, through the passed descriptors
    cold = subprocess.run(
        [str(BIN / "privhar"), *argv[1:], str(tmp_path / "cold")],
        capture_output=True,
        text=True,
        env={key: value for key, value in os.environ.items() if key != SERVER_ENV},
    )
    assert cold.returncode == 0, cold.stderr
    assert digests(tmp_path / "warm") == digests(tmp_path / "cold")

    from mlflow import MlflowClient

    from tasks.core.tracking import configure

    run = MlflowClient().search_runs(
        [configure()],
        "tags.`privhar.stage` = 'synthesize'",
        order_by=["attributes.start_time DESC"],
        max_results=2,
    )[1]  # the warm one ran first
    assert (
        run.data.tags["privhar.process_start"] == "stage server fork"
        and run.data.metrics["stage_seconds"] > 0
    )


def test_bad_input_and_usage_errors_end_as_they_would_cold(server, tmp_path, capfd):
    address, _ = server
    assert run_on_server(address, ["privhar", "stage", "scan", "--out", "/proc/listing.csv"]) == 1
    lines = capfd.readouterr().err.strip().splitlines()
    assert lines == [
        "privhar: error: /proc/listing.csv: the --out path cannot go under /proc (a kernel pseudo-file system)"
    ]
    assert run_on_server(address, ["privhar", "stage", "scan", "--no-such-option"]) == 2
    assert "No such option" in capfd.readouterr().err


def test_a_request_with_other_thread_settings_runs_cold(server, tmp_path, monkeypatch, capfd):
    address, _ = server
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    assert (
        run_on_server(address, ["privhar", "stage", "scan", "--out", str(tmp_path / "files.csv")])
        is None
    )
    assert (
        "OMP_NUM_THREADS differ" in capfd.readouterr().err and not (tmp_path / "files.csv").exists()
    )


def long_stage(address: str, folder: Path) -> subprocess.Popen:
    """A client whose stage renders far more videos than the test waits for (with its worker pool)."""
    params = write_params(folder, {"synthesize": {"videos_per_action": 400, "frames": 48}})
    return subprocess.Popen(
        [
            str(BIN / "privhar"),
            "stage",
            "synthesize",
            "--params",
            str(params),
            "--out",
            str(folder / "out"),
        ],
        env={**os.environ, SERVER_ENV: address},
        stderr=subprocess.DEVNULL,
    )


def group_gone(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return True
    return False


def wait_for(condition, seconds: float = 30.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.mark.parametrize("signum, status", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_to_the_client_reaches_its_stage(server, tmp_path, signum, status):
    address, process = server
    client = long_stage(address, tmp_path)
    assert wait_for(lambda: len(stages_of(process)) == 1)
    stage = stages_of(process)[0]
    time.sleep(1.0)  # into its work
    client.send_signal(signum)
    assert client.wait(timeout=60) == status
    assert wait_for(lambda: group_gone(stage))  # the stage and its workers
    assert not (
        tmp_path / "out"
    ).exists()  # the staging folder went with it: no half-written output


def test_a_killed_client_takes_its_stage_down_and_the_server_serves_on(server, tmp_path):
    address, process = server
    client = long_stage(address, tmp_path)
    assert wait_for(lambda: len(stages_of(process)) == 1)
    stage = stages_of(process)[0]
    time.sleep(1.0)
    client.kill()
    client.wait(timeout=30)
    assert wait_for(lambda: group_gone(stage))
    assert (
        run_on_server(address, ["privhar", "stage", "scan", "--out", str(tmp_path / "again.csv")])
        == 0
    )


def test_every_stage_function_times_its_work():
    """The time table's work column (stage_seconds) starts where each stage's function is called."""
    import importlib

    from flows.stage_server import stage_imports

    for module, name in stage_imports():
        logs_a_run = "stage_run" in vars(importlib.import_module(module))
        assert (
            getattr(getattr(importlib.import_module(module), name), "stage_work", False)
            == logs_a_run
        ), f"{module}.{name}"
