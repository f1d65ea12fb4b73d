"""Processes that end with the process that started them (Linux's ``PR_SET_PDEATHSIG``; elsewhere nothing).

A ``privhar run`` killed outright (SIGKILL) runs no cleanup of its own, so its children must notice by
themselves: ``dvc repro`` asks the kernel for SIGTERM when its runner dies, and a ``privhar stage`` for SIGTERM
when the ``dvc`` that started it dies (issue 35). Standard library only: :mod:`flows.launch` imports it.
"""

from __future__ import annotations

import contextlib
import ctypes
import signal

PR_SET_PDEATHSIG = 1


def end_with_parent() -> None:
    """SIGTERM this process when the thread that started it ends (Linux; elsewhere nothing)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
