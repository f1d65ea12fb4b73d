"""A run's work ends with the run (issue 35): each ``dvc repro`` and its stage under flows/group_guard.py, the project
lock held until the last of them is gone, even when ``privhar flow`` itself is killed outright; its temporary Prefect
server goes too."""

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from flows.group_guard import guarded
from flows.project_lock import check_unlocked, held_lock_fds, project_lock
from tasks.core.errors import PrivharError
from tests.conftest import BIN, fresh_mlflow_store, make_project

PF_EXITING = 0x4  # the kernel's flag for a process inside exit(): its descriptors (the lock's) close before it is a zombie


def alive(pid: int) -> bool:
    """Running, and not already on its way out (a zombie, or exiting)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    fields = stat.rsplit(")", 1)[1].split()  # state is /proc's field 3, flags field 9
    return fields[0] not in ("Z", "X") and not int(fields[6]) & PF_EXITING


def wait_until(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def processes_in(folder: Path) -> list[int]:
    """Live processes whose working folder is ``folder``: a run's guard, dvc and stages."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if Path(os.readlink(entry / "cwd")) == folder and alive(int(entry.name)):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def test_the_guard_ends_its_group_when_its_owner_is_killed(tmp_path):
    """An owner killed outright (SIGKILL) runs no cleanup: its guarded command and that command's children go."""
    pids = tmp_path / "pids"
    owner = textwrap.dedent(
        f"""
        import subprocess, sys, time
        from flows.group_guard import guarded
        command = [sys.executable, "-c", "import os, subprocess, time; "
                   "child = subprocess.Popen(['sleep', '300']); "
                   "open({str(pids)!r}, 'w').write(f'{{os.getpid()}} {{child.pid}}'); time.sleep(300)"]
        subprocess.Popen(guarded(command), start_new_session=True)
        time.sleep(300)
        """
    )
    process = subprocess.Popen([sys.executable, "-c", owner])
    try:
        assert wait_until(lambda: pids.exists() and pids.read_text().count(" ") == 1, 30)
        work = [int(pid) for pid in pids.read_text().split()]
        assert all(alive(pid) for pid in work)
        process.kill()
        process.wait()
        assert wait_until(lambda: not any(alive(pid) for pid in work), 15), (
            "the work outlived its owner"
        )
    finally:
        process.kill()


def test_the_lock_is_held_until_the_work_it_was_passed_to_ends(tmp_path):
    """The runner's own end (its block left) does not free the project while work holding the lock still runs."""
    with project_lock(tmp_path, "a test run"):
        guard = subprocess.Popen(
            guarded(["sleep", "300"]), pass_fds=held_lock_fds(), start_new_session=True
        )
    try:
        with pytest.raises(PrivharError, match="already in progress"):
            check_unlocked(tmp_path)
    finally:
        guard.terminate()  # the guard ends its group (sleep included), then itself
        guard.wait(timeout=30)
    check_unlocked(tmp_path)  # free once the work is gone
    assert not held_lock_fds()


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    project = make_project(tmp_path_factory.mktemp("lifetime")).resolve()
    fresh_mlflow_store(project)  # the store start_run names
    return project


def start_run(project: Path) -> tuple[subprocess.Popen, dict[str, str]]:
    """`privhar flow` in ``project`` (no Prefect server up: it starts its own), returned once its first stage is at
    work."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("PREFECT_")}
    env |= {
        "MLFLOW_TRACKING_URI": f"sqlite:///{project / 'mlflow.db'}",
        "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
    }
    process = subprocess.Popen(
        [str(BIN / "privhar"), "flow"],
        cwd=project,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert process.stderr is not None
    for line in process.stderr:
        if "Running stage 'synthesize'" in line:
            break
    time.sleep(1.0)  # the stage at work
    assert len(processes_in(project)) >= 3  # the runner, the guard, dvc (and the stage)
    return process, env


def server_left(project: Path) -> bool:
    """The run's temporary Prefect server (its group's leader in .prefect/flow-server.pid) is still there."""
    try:
        leader = int((project / ".prefect" / "flow-server.pid").read_text())
    except (OSError, ValueError):
        return False
    try:
        os.killpg(leader, 0)
    except ProcessLookupError:
        return False
    return True


def nothing_left(project: Path, env: dict[str, str]) -> None:
    """Within seconds nothing of the run is left, its Prefect server included; then the project is free and DVC not
    left locked."""
    try:
        assert wait_until(lambda: not processes_in(project), 20), (
            f"left running: {processes_in(project)}"
        )
        assert wait_until(lambda: not server_left(project), 30), "its Prefect server outlived it"
    finally:
        for pid in processes_in(project):
            os.kill(pid, signal.SIGKILL)
    check_unlocked(project)
    status = subprocess.run(
        [str(BIN / "dvc"), "status"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert status.returncode == 0 and "synthesize" in status.stdout, status.stderr


def test_a_killed_privhar_flow_takes_its_dvc_stages_and_server_down(project):
    """SIGKILL to `privhar flow` mid-stage: its dvc, its stage and its Prefect server end, the lock free only after."""
    process, env = start_run(project)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    # while anything of the run is left, the project stays locked (the runner's own descriptor died with it)
    try:
        check_unlocked(project)
        assert not processes_in(project), "the lock was free while the run's work went on"
    except PrivharError as refused:
        assert "which has ended: its dvc and stages are stopping" in str(refused)
    nothing_left(project, env)


def test_a_terminated_privhar_flow_ends_its_work_and_says_so(project):
    """SIGTERM to `privhar flow` mid-stage: its stage ends too, no later stage starts, one line, status 143 within
    seconds; the flow run is marked crashed on its server before that server stops."""
    process, env = start_run(project)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 143, stderr[-3000:]
    assert stderr.rstrip().splitlines()[-1] == "privhar: terminated (SIGTERM)"
    assert "Traceback" not in stderr and "Running stage 'decode'" not in stderr
    nothing_left(project, env)


def test_an_interrupted_privhar_flow_ends_its_work_and_says_so(project):
    """Ctrl-C as a terminal sends it (SIGINT to the whole process group) mid-stage: the same, status 130 (issue 61:
    the next stage started, Prefect's temporary server died under the flow, and the flow hung for minutes)."""
    process, env = start_run(project)
    os.killpg(process.pid, signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr[-3000:]
    assert stderr.rstrip().splitlines()[-1] == "privhar: interrupted"
    assert "Traceback" not in stderr and "Running stage 'decode'" not in stderr
    nothing_left(project, env)
