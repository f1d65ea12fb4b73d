"""map_ordered: in order on a process pool, and never a fork of a process running other threads."""

import multiprocessing.forkserver
import os
import subprocess
import sys
import threading
from pathlib import Path

import tasks.core.parallel as parallel
from tasks.core.parallel import map_ordered, pool_context


def _run_in_project(script: str, *args: str, timeout: float) -> str:
    """``script`` in a fresh interpreter at the project's root: its stdout, once it exited 0 (a hang fails at timeout)."""
    result = subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout.strip()


def _pid_of(value: int) -> tuple[int, int]:
    return value, os.getpid()


def _threads(_: int) -> tuple[int, int]:
    import cv2
    import torch

    return cv2.getNumThreads(), torch.get_num_threads()


def test_results_in_input_order_with_a_thread_running(monkeypatch):
    """With another thread running the pool comes from a fork server; work shorter than SERIAL_FIRST_S runs here and
    never starts one, longer work goes to the pool after it."""
    stop = threading.Event()
    helper = threading.Thread(
        target=stop.wait, daemon=True
    )  # as MLflow or Prefect threads would be
    helper.start()
    try:
        assert pool_context(abs).get_start_method() == "forkserver"
        short = map_ordered(_pid_of, list(range(20)), workers=2, desc="test")
        assert short == [
            (value, os.getpid()) for value in range(20)
        ]  # no pool for 20 instant calls
        import cv2
        import torch

        before = cv2.getNumThreads(), torch.get_num_threads()
        cv2.setNumThreads(2)
        torch.set_num_threads(2)
        try:
            # here as in a worker: one OpenCV and one torch thread (the people finders' boxes depend on OpenCV's)
            assert map_ordered(_threads, [0, 1], workers=2, desc="test") == [(1, 1), (1, 1)]
            assert (cv2.getNumThreads(), torch.get_num_threads()) == (2, 2)  # this process's again
        finally:
            cv2.setNumThreads(before[0])
            torch.set_num_threads(before[1])
        monkeypatch.setattr(parallel, "SERIAL_FIRST_S", 0.0)
        pooled = map_ordered(_pid_of, list(range(20)), workers=2, desc="test")
        assert [value for value, _ in pooled] == list(range(20))
        assert os.getpid() not in {pid for _, pid in pooled}  # all in the pool's workers
    finally:
        stop.set()
        helper.join()


def test_workers_that_read_tables_after_polars_ran_here_do_not_hang(tmp_path):
    """polars' Rust threads are invisible to threading.active_count(): a fork after polars ran hung (assess under dvc)."""
    script = (
        "import sys; from pathlib import Path; import polars as pl\n"
        "from tasks.core.manifest import read_manifest, write_manifest\n"
        "from tasks.core.parallel import map_ordered, pool_context\n"
        "if __name__ == '__main__':\n"
        "    path = Path(sys.argv[1]) / 'manifest.parquet'\n"
        "    write_manifest([{'video_id': f'v{i}', 'split': 'train', 'label': i, 'action': 'a', 'path': 'x', 'n_frames': 1,\n"
        "                     'fps': 1.0, 'height': 1, 'width': 1} for i in range(50)], path)\n"
        "    assert len(read_manifest(path)) == 50  # polars' thread pool is running now\n"
        "    assert pool_context(read_manifest).get_start_method() == 'forkserver'\n"
        "    import tasks.core.parallel; tasks.core.parallel.SERIAL_FIRST_S = 0.0  # the pool, however short the work\n"
        "    print(sum(map(len, map_ordered(read_manifest, [path] * 6, workers=2, desc='test'))))\n"
    )
    assert _run_in_project(script, str(tmp_path), timeout=180) == "300"


def test_workers_forked_after_opencv_ran_here_do_not_hang(tmp_path):
    """cv2.setNumThreads in a fork of a process whose OpenCV pool has run waits forever (it hung an audit pool in CI)."""
    script = (
        "import cv2, numpy as np\n"
        "from tasks.core.parallel import map_ordered, pool_context\n"
        "frame = np.random.default_rng(0).integers(0, 255, (720, 1280, 3), dtype=np.uint8)\n"
        "def blur_threads(size):\n"
        "    cv2.GaussianBlur(frame, (size, size), 5)\n"
        "    return cv2.getNumThreads()\n"
        "if __name__ == '__main__':\n"
        "    for _ in range(5):\n"
        "        cv2.GaussianBlur(frame, (21, 21), 5)  # OpenCV's thread pool has run\n"
        "    before = cv2.getNumThreads()\n"
        "    assert pool_context(blur_threads).get_start_method() == 'fork'\n"
        "    print(map_ordered(blur_threads, [9, 15, 21, 27], workers=2, desc='test'), cv2.getNumThreads() == before)\n"
    )
    assert _run_in_project(script, timeout=120) == "[1, 1, 1, 1] True"


def _takes_interrupts(_: int) -> tuple[int, bool]:
    import signal

    return os.getpid(), signal.getsignal(signal.SIGINT) != signal.SIG_IGN


def test_workers_never_take_a_ctrl_c_the_parent_ends_them(monkeypatch):
    """Issue 82: Ctrl-C reaches every process of the terminal's group, and a worker still starting died with "Fatal
    Python error: init_import_site". Workers start with SIGINT ignored; this process takes it again after."""
    import signal

    monkeypatch.setattr(parallel, "SERIAL_FIRST_S", 0.0)
    results = parallel.map_on_processes(_takes_interrupts, list(range(4)), workers=2, desc="t")
    assert {pid for pid, _ in results} - {os.getpid()}  # the pool ran them
    assert not any(takes for pid, takes in results if pid != os.getpid())
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    parallel._start_fork_server()  # the server a pool forks its workers from ignores it from its start
    server = multiprocessing.forkserver._forkserver._forkserver_pid
    ignored = int(Path(f"/proc/{server}/status").read_text().split("SigIgn:")[1].split()[0], 16)
    assert ignored & (1 << (signal.SIGINT - 1))
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
