"""The local servers stay consistent under concurrent and killed commands (issue 19)."""

from __future__ import annotations

import io
import logging
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from flows.servers import answers, free_port, pid_alive
from tests.conftest import BIN, make_project


def _privhar(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if not key.startswith("PREFECT_")}
    env["PATH"] = f"{BIN}{os.pathsep}{env['PATH']}"
    return subprocess.run(
        [str(BIN / "privhar"), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )


def _wait(check, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.5)
    return False


@pytest.mark.parametrize(("command", "server"), [("ui", "MLflow UI"), ("serve", "Prefect server")])
def test_a_busy_port_is_one_line_exit_1_and_touches_no_other_pid_file(tmp_path, command, server):
    """Issue 82: `privhar serve` on a busy port exited 2 (click's usage error), `privhar ui` 1."""
    (tmp_path / "params.yaml").write_text((Path(__file__).parents[1] / "params.yaml").read_text())
    other = tmp_path / ".mlflow-ui" / "ui-5999.pid"
    other.parent.mkdir()
    other.write_text("123456")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = _privhar(command, "--port", str(port), cwd=tmp_path, timeout=120)
    assert result.returncode == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert (
        len(lines) == 1
        and lines[0].startswith("privhar: error: ")
        and lines[0].endswith(
            f"{server}: port {port} on 127.0.0.1 is busy (another program listens there); choose another with --port"
        )
    ), lines
    assert other.read_text() == "123456"


def test_a_killed_ui_leaves_no_server_and_stop_ends_a_running_one(tmp_path):
    (tmp_path / "params.yaml").write_text((Path(__file__).parents[1] / "params.yaml").read_text())
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    ports = [free_port(), free_port()]
    uis = []
    pid_files = [tmp_path / ".mlflow-ui" / f"ui-{port}.pid" for port in ports]
    try:
        for port in (
            ports
        ):  # one after the other: two MLflow servers migrating one new store at once collide
            uis.append(
                subprocess.Popen(
                    [str(BIN / "privhar"), "ui", "--port", str(port)],
                    cwd=tmp_path,
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,
                )
            )
            assert _wait(lambda port=port: answers(f"http://127.0.0.1:{port}/health"), 120), (
                f"the UI on {port} never started"
            )
        groups = [int(f.read_text()) for f in pid_files]
        os.kill(
            uis[0].pid, signal.SIGKILL
        )  # privhar ui itself, killed outright: its server must not be orphaned
        uis[0].wait()
        assert _wait(lambda: not pid_alive(groups[0]), 60), (
            "the first UI's server outlived its privhar ui"
        )
        assert pid_alive(groups[1])  # the other UI is untouched
        # issue 82: a second privhar ui said "Ctrl-C ends it" and returned at once
        again = _privhar("ui", "--port", str(ports[1]), cwd=tmp_path)
        assert again.returncode == 0 and again.stderr.strip().endswith(
            f"started by another privhar command of this project (pid {groups[1]}, log "
            f"{tmp_path.resolve() / '.mlflow-ui' / f'ui-{ports[1]}.log'}); 'privhar ui stop --port {ports[1]}' ends it"
        ), again.stderr
        stopped = _privhar("ui", "--stop", "--port", str(ports[1]), cwd=tmp_path)
        assert (
            stopped.returncode == 0
            and f"stopped the MLflow UI on port {ports[1]}" in stopped.stderr
        )
        assert _wait(lambda: not pid_alive(groups[1]), 30)
        assert uis[1].wait(timeout=60) == 0  # its privhar ui saw the server go and ended
    finally:
        for ui in uis:
            if ui.poll() is None:
                os.killpg(ui.pid, signal.SIGKILL)


def test_a_second_serve_is_refused_naming_the_first(tmp_path):
    (tmp_path / "params.yaml").write_text((Path(__file__).parents[1] / "params.yaml").read_text())
    (tmp_path / ".prefect").mkdir()
    (tmp_path / ".prefect" / "serve.pid").write_text(
        f"{os.getpid()} 127.0.0.1 4321"
    )  # a live process serving
    result = _privhar("serve", cwd=tmp_path, timeout=60)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"privhar: error: privhar serve is already running for this project (pid {os.getpid()}, Prefect server at "
        "http://127.0.0.1:4321); stop it first with 'privhar serve --stop'"
    ]
    assert (tmp_path / ".prefect" / "serve.pid").read_text().startswith(str(os.getpid()))


def test_flow_checks_the_lock_before_starting_a_server(tmp_path):
    from flows.project_lock import project_lock

    project = make_project(tmp_path)
    with project_lock(project, "a test run"):
        started = time.monotonic()
        result = _privhar("flow", cwd=project, timeout=120)
        seconds = time.monotonic() - started
    assert (
        result.returncode == 1
        and "a pipeline run is already in progress (a test run" in result.stderr
    )
    assert len(result.stderr.strip().splitlines()) == 1 and seconds < 15, (seconds, result.stderr)


def test_flow_finds_the_server_of_serve_on_another_port(tmp_path, prefect_api, monkeypatch):
    from flows.prefect_server import use_project_server

    port = int(prefect_api.rsplit(":", 1)[1].split("/")[0])
    (tmp_path / "params.yaml").write_text((Path(__file__).parents[1] / "params.yaml").read_text())
    (tmp_path / ".prefect").mkdir()
    (tmp_path / ".prefect" / "serve.pid").write_text(f"{os.getpid()} 127.0.0.1 {port}")
    monkeypatch.delenv("PREFECT_API_URL")
    assert use_project_server(tmp_path) == f"http://127.0.0.1:{port}/api"


def test_prefect_tracebacks_go_to_the_log_file_not_the_console(tmp_path):
    from flows.flow_logging import TracebacksToFile

    console = io.StringIO()
    handler = logging.StreamHandler(console)
    handler.addFilter(TracebacksToFile(tmp_path / "flow.log"))
    logger = logging.getLogger("prefect.task_runs.test")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        raise RuntimeError("stage train failed")
    except RuntimeError:
        logger.error("Task run failed with exception: %s", "boom", exc_info=True)
    finally:
        logger.removeHandler(handler)
    assert console.getvalue() == "Task run failed with exception: boom\n"
    written = (tmp_path / "flow.log").read_text()
    assert "Traceback (most recent call last)" in written and "stage train failed" in written


def _http_server(project: Path, port: int):
    """A real HTTP server as a project's LocalServer (Python's http.server: quick to start, answers 200 on /)."""
    import sys

    from flows.servers import LocalServer

    home = project / ".servers"
    return LocalServer(
        "test server",
        (
            sys.executable,
            "-m",
            "http.server",
            str(port),
            "--bind",
            "127.0.0.1",
            "--directory",
            str(project),
        ),
        dict(os.environ),
        f"http://127.0.0.1:{port}/",
        home / "server.pid",
        home / "server.log",
        "127.0.0.1",
        port,
    )


def test_a_server_another_project_started_on_the_port_is_refused_not_reused(tmp_path):
    """issue 35: privhar ui in project B on A's port said 'already up (store of B)' while serving A's store."""
    import pytest

    from tasks.core.errors import PrivharError

    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir(), second.mkdir()
    port = free_port()
    server = _http_server(first, port)
    assert server.start(timeout=60)
    try:
        assert server.start() is False  # its own project finds it up and reuses it
        with pytest.raises(
            PrivharError, match=rf"^test server: port {port} on 127.0.0.1 answers, but not as "
        ):
            _http_server(second, port).start()
    finally:
        server.stop()
    assert not answers(f"http://127.0.0.1:{port}/")
