"""A run's work ends with the run (issue 35): ``dvc repro`` and its stages under flows/group_guard.py, the project
lock held until the last of them is gone, even when ``privhar run`` itself is killed outright."""

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
from tests.conftest import BIN, make_project

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
    return make_project(tmp_path_factory.mktemp("lifetime")).resolve()


def start_run(project: Path) -> tuple[subprocess.Popen, dict[str, str]]:
    """`privhar run` in ``project``, returned once its first stage is at work."""
    env = {
        **os.environ,
        "MLFLOW_TRACKING_URI": f"sqlite:///{project / 'mlflow.db'}",
        "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
    }
    process = subprocess.Popen(
        [str(BIN / "privhar"), "run"],
        cwd=project,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith("Running stage 'synthesize'"):
            break
    time.sleep(1.0)  # the stage at work
    assert len(processes_in(project)) >= 3  # the runner, the guard, dvc (and the stage)
    return process, env


def nothing_left(project: Path, env: dict[str, str]) -> None:
    """Within seconds nothing of the run is left; then the project is free and DVC not left locked."""
    try:
        assert wait_until(lambda: not processes_in(project), 20), (
            f"left running: {processes_in(project)}"
        )
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


def test_a_killed_privhar_run_takes_its_dvc_and_stages_down(project):
    """SIGKILL to `privhar run` mid-stage: its dvc went on before, and the lock was free beside it."""
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


def test_a_terminated_privhar_run_ends_its_work_and_says_so(project):
    """SIGTERM to `privhar run` mid-stage: its stage ended too (it ran on, silently, before), one line, status 143."""
    process, env = start_run(project)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 143
    assert stderr.rstrip().splitlines()[-1] == "privhar: terminated (SIGTERM)"
    assert "Traceback" not in stderr
    nothing_left(project, env)
