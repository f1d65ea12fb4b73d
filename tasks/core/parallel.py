"""Map a function over videos on a local process pool, in order, with a progress bar."""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

from tqdm import tqdm

T = TypeVar("T")
R = TypeVar("R")


def worker_count(requested: int) -> int:
    """``base.workers``: 0 means one per CPU core."""
    return requested if requested > 0 else (os.cpu_count() or 1)


def map_ordered(function: Callable[[T], R], items: Sequence[T], *, workers: int, desc: str) -> list[R]:
    """``[function(item) for item in items]``, on ``workers`` processes, showing progress.

    Results come back in input order, so outputs do not depend on scheduling.
    """
    progress = tqdm(total=len(items), desc=desc, unit="video", dynamic_ncols=True)
    try:
        if workers <= 1 or len(items) <= 1:
            results: Iterable[R] = map(function, items)
            return [_tick(progress, result) for result in results]
        context = multiprocessing.get_context("fork")
        with context.Pool(processes=min(workers, len(items)), initializer=_one_thread_per_worker) as pool:
            return [_tick(progress, result) for result in pool.imap(function, items, chunksize=1)]
    finally:
        progress.close()


def _one_thread_per_worker() -> None:
    """Workers already fill the cores; nested thread pools would only contend."""
    import cv2
    import torch

    cv2.setNumThreads(1)
    torch.set_num_threads(1)


def _tick(progress: tqdm, result: R) -> R:
    progress.update(1)
    return result
