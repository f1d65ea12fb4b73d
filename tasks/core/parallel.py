"""Map a function over videos on a local process pool, in order, showing progress.

An orchestrator may install another mapper for the stage it runs in-process (the Prefect
flow sends shards of videos to its task runner: threads or a Dask cluster); the stage
code does not change, and results still come back in input order.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.forkserver
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextvars import ContextVar
from typing import TypeVar

from tasks.core.progress import Progress, progress

T = TypeVar("T")
R = TypeVar("R")
Mapper = Callable[[Callable[[T], R], Sequence[T], str], list[R]]
_installed: ContextVar[Mapper | None] = ContextVar("privhar_mapper", default=None)


@contextlib.contextmanager
def installed_mapper(mapper: Mapper) -> Iterator[None]:
    """Within the block (and this thread), :func:`map_ordered` calls ``mapper(function, items, desc)``."""
    token = _installed.set(mapper)
    try:
        yield
    finally:
        _installed.reset(token)


# The cores one stage may use when the flow runs several at once (orchestrate.stage_workers): its processes and
# threads, torch's and BLAS's included. Unset: every core of the machine.
STAGE_CORES_ENV = "PRIVHAR_STAGE_CORES"


def stage_cores() -> int:
    """The cores this stage may use: its share (``PRIVHAR_STAGE_CORES``) where the flow set one, else all."""
    share = os.environ.get(STAGE_CORES_ENV, "")
    return max(1, int(share)) if share.isdigit() else (os.cpu_count() or 1)


def core_share(stages_at_once: int) -> int:
    """Each of ``stages_at_once`` stages' cores, out of the cores this process may use (a flow given a share splits
    that share): two trainings of one thread each ran 1.2-1.3x faster than one after the other on two threads, but a
    whole run with two stages at once was slower (docs/operations.md).

    >>> core_share(1) == stage_cores(), core_share(10**6)
    (True, 1)
    """
    return max(1, stage_cores() // stages_at_once)


def use_stage_cores() -> None:
    """Cap torch's intra-op threads (and, before torch loads, OpenMP's and BLAS's) at the stage's share of cores."""
    if not os.environ.get(STAGE_CORES_ENV, "").isdigit():
        return
    cores = str(stage_cores())
    if "torch" in sys.modules:
        import torch

        torch.set_num_threads(int(cores))
    else:  # read when the libraries load: the stage imports them after this
        for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ.setdefault(name, cores)


def worker_count(requested: int) -> int:
    """``base.workers``: 0 means one per core the stage may use (:func:`stage_cores`)."""
    return requested if requested > 0 else stage_cores()


def map_ordered(
    function: Callable[[T], R], items: Sequence[T], *, workers: int, desc: str
) -> list[R]:
    """``[function(item) for item in items]``, on ``workers`` processes, showing progress.

    Results come back in input order, so outputs do not depend on scheduling.
    """
    mapper = _installed.get()
    if mapper is not None:
        return mapper(function, items, desc)
    return map_on_processes(function, items, workers=workers, desc=desc)


def map_on_processes(
    function: Callable[[T], R],
    items: Sequence[T],
    *,
    workers: int,
    desc: str,
    unit: str = "video",
) -> list[R]:
    """:func:`map_ordered` on a local process pool, never on an installed mapper (work that is not per video). Where
    the pool must come from a fork server, the first :data:`SERIAL_FIRST_S` of the work runs here: work that ends in
    that time never pays for the server."""
    bar = progress(len(items), desc, unit)
    try:
        if workers <= 1 or len(items) <= 1:
            results: Iterable[R] = map(function, items)
            return [_tick(bar, result) for result in results]
        context = pool_context(function)
        forked = context.get_start_method() == "fork"
        done = [] if forked else _until(SERIAL_FIRST_S, function, items, bar)
        rest = items[len(done) :]
        if not rest:
            return done
        if not forked:
            _start_fork_server()
        with _opencv_threads_for_forks(1) if forked else contextlib.nullcontext(False) as set_here:
            pool = context.Pool(
                processes=min(workers, len(rest)),
                initializer=_one_thread_per_worker,
                initargs=(not set_here,),
            )
        with pool:
            return done + [_tick(bar, result) for result in pool.imap(function, rest, chunksize=1)]
    finally:
        bar.close()


# A fork server's pool takes about 4 s to be of use on this 2-core machine (it imports torch and cv2, then each worker
# the function's module): the budget stage of the tests' tiny project took 7.5 s with it and 3.2 s without, for 0.1 s
# of work (2026-11-30). So work that needs one runs here first, and a pool starts only for what is left after this long.
SERIAL_FIRST_S = 3.0


def _until(
    seconds: float, function: Callable[[T], R], items: Sequence[T], bar: Progress
) -> list[R]:
    """``function`` on the first items, in this process, until ``seconds`` have passed (the last call may overrun),
    on one torch and one OpenCV thread as in a worker (:func:`_one_thread_per_worker`): the results must not depend on
    where an item ran, and OpenCV's people finders found other boxes on two threads than on one (2026-11-30)."""
    started = time.monotonic()
    done: list[R] = []
    with _opencv_threads_for_forks(1), _torch_threads(1):
        for item in items:
            if time.monotonic() - started >= seconds:
                break
            done.append(_tick(bar, function(item)))
            if len(done) == 1 and (time.monotonic() - started) * len(items) > seconds:
                # the work will outlast this start: the fork server imports its modules on another core meanwhile
                # (it took 3.5 s for privhar protect's, with torch), not after it
                _start_fork_server()
    return done


@contextlib.contextmanager
def _torch_threads(threads: int) -> Iterator[None]:
    """torch's intra-op threads in the block, where torch is loaded; restored after."""
    if "torch" not in sys.modules:
        yield
        return
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


FORK_UNSAFE_MODULES = ("mediapipe", "polars")


def pool_context(function: Callable) -> multiprocessing.context.BaseContext:
    """``fork`` in a single-threaded process (fast); else a fork server.

    Forking a process that runs other threads (MLflow's, Prefect's, a test runner's) can copy
    a lock some thread holds, and the child waits on it forever. The fork server is started
    clean, once per process, with the function's module, cv2 and (where this process has it) torch imported, and forks
    the workers from there. mediapipe's TFLite graphs run native threads that Python does not
    count (a forked worker hung on their locks after a clip had been through mediapipe), and so
    does polars' Rust thread pool (assess's workers hung under ``dvc repro`` once the stage had read
    its manifest with polars): once either is loaded, the fork server too.
    """
    if threading.active_count() == 1 and not any(
        name in sys.modules for name in FORK_UNSAFE_MODULES
    ):
        return multiprocessing.get_context("fork")
    context = multiprocessing.get_context("forkserver")
    preload = [getattr(function, "func", function).__module__, "cv2"]
    # work that never imports torch (privhar protect) does not wait for its 2-3 s
    if "torch" in sys.modules:
        preload.append("torch")
    context.set_forkserver_preload(preload)
    return context


def _start_fork_server() -> None:
    """Start the fork server, where it is not up, with SIGINT ignored. The terminal sends a Ctrl-C to every process in
    its group, and a server still importing died of it with "Fatal Python error: init_import_site" and a traceback
    (issue 82); started ignoring it, the server keeps doing so, and gives that to the workers it forks. Spawning it
    takes milliseconds (its imports come after), so a Ctrl-C pressed meanwhile is not lost to this process in practice.
    A blocked signal would not do: the server starts with an empty signal mask."""
    if threading.current_thread() is not threading.main_thread():
        multiprocessing.forkserver.ensure_running()
        return
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        multiprocessing.forkserver.ensure_running()
    finally:
        signal.signal(signal.SIGINT, before)


@contextlib.contextmanager
def _opencv_threads_for_forks(threads: int) -> Iterator[bool]:
    """OpenCV's thread count for workers forked in the block, set here in the parent and restored after;
    yields whether it was (not where cv2 is not loaded: a worker that imports it starts with a fresh pool).

    A fork inherits OpenCV's pool state but not its threads: once the parent's pool has run,
    ``cv2.setNumThreads`` in the child waits forever on threads it does not have (reproduced:
    ``tests/test_parallel.py``), while the parent may set it safely before forking.
    """
    if "cv2" not in sys.modules:
        yield False
        return
    import cv2

    before = cv2.getNumThreads()
    cv2.setNumThreads(threads)
    try:
        yield True
    finally:
        cv2.setNumThreads(before)


def _one_thread_per_worker(set_opencv: bool) -> None:
    """Workers already fill the cores; nested thread pools would only contend. A worker ignores Ctrl-C: the parent
    takes it, and the pool's exit ends the workers (one that took it printed a traceback; issue 82).

    ``set_opencv`` is false where the parent already set OpenCV's threads for its forks
    (:func:`_opencv_threads_for_forks`).
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    import torch

    if set_opencv:
        import cv2

        cv2.setNumThreads(1)
    torch.set_num_threads(1)


def _tick(bar: Progress, result: R) -> R:
    bar.update(1)
    return result
