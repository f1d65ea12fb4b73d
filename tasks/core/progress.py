"""Progress of the long loops: a tqdm bar on a terminal; a log line every few seconds everywhere else.

Under ``dvc repro``, a Prefect task or CI, stderr is no terminal: a bar would print a line per
refresh, so the loop logs ``desc: n/total (rate, time left)`` through ``logging`` instead, at most
every ``PRIVHAR_PROGRESS_SECONDS`` (default 10) seconds and once at the end.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from typing import Any, Protocol

from tqdm import tqdm

LOG = logging.getLogger(__name__)
INTERVAL_VARIABLE = "PRIVHAR_PROGRESS_SECONDS"


class Progress(Protocol):
    def update(self, n: int = 1) -> Any: ...
    def set_postfix(self, **values: Any) -> Any: ...
    def close(self) -> Any: ...


class LogProgress:
    """tqdm's ``update`` / ``set_postfix`` / ``close``, reported as log lines at most every ``interval`` seconds."""

    def __init__(self, total: int, desc: str, unit: str, interval: float) -> None:
        self.total, self.desc, self.interval = total, desc, interval
        self.units = unit + ("es" if unit.endswith(("ch", "sh", "s", "x")) else "s")
        self.count, self.postfix = 0, ""
        self.started = self.reported = time.monotonic()

    def update(self, n: int = 1) -> None:
        self.count += n
        if time.monotonic() - self.reported >= self.interval:
            self._report()

    def set_postfix(self, **values: Any) -> None:
        self.postfix = ", ".join(f"{key}={value}" for key, value in values.items())

    def close(self) -> None:
        if self.count:
            self._report()

    def line(self) -> str:
        elapsed = time.monotonic() - self.started
        rate = self.count / elapsed if elapsed > 0 else 0.0
        left = (
            f", {(self.total - self.count) / rate:.0f} s left"
            if rate > 0 and self.total > self.count
            else ""
        )
        extra = f", {self.postfix}" if self.postfix else ""
        return f"{self.desc}: {self.count}/{self.total} {self.units} ({rate:.2f}/s{left}{extra})"

    def _report(self) -> None:
        self.reported = time.monotonic()
        LOG.info(self.line())


def progress(total: int, desc: str, unit: str = "step") -> Progress:
    """A progress reporter for ``total`` units of work: a tqdm bar on a terminal, else :class:`LogProgress`."""
    if sys.stderr.isatty():
        return tqdm(total=total, desc=desc, unit=unit, dynamic_ncols=True)
    return LogProgress(total, desc, unit, float(os.environ.get(INTERVAL_VARIABLE, "10")))
