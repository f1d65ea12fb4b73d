"""A disk cache for pure, slow functions: the privacy accountants (joblib's ``Memory``).

Why: ``make run`` ran five private-training stages, each a separate process, and each spent
two thirds of its time in the accountants (PRV σ calibration, the ε curve per epoch, the
per-person PLD mixtures), recomputing values the stage before had computed for the same
(σ, q, steps, δ). The values are pure functions of their arguments, so a disk cache shared by
the stages returns the same numbers the named accountant computes, without computing them again.

Keyed by code, not only by arguments: joblib hashes the cached function's own source, but not
the helpers it calls, so the cache folder is also named by a digest of the module's source
and of the accounting libraries' versions. A change anywhere in the module, or a new Opacus
or dp-accounting, starts a fresh cache: a broken helper can never hide behind an old value.

``PRIVHAR_CACHE_DIR`` moves the cache (the tests give each session its own); ``off`` turns it off.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

CACHE_ENV = "PRIVHAR_CACHE_DIR"
DEFAULT_FOLDER = Path(".privhar") / "cache"
Function = TypeVar("Function", bound=Callable)


@functools.lru_cache(maxsize=64)
def code_digest(source_file: Path, packages: tuple[str, ...], helpers: tuple[str, ...] = ()) -> str:
    """SHA-256 prefix of ``source_file``'s text, its ``helpers``' texts (modules beside it that it calls) and the
    installed versions of ``packages``."""
    digest = hashlib.sha256(Path(source_file).read_bytes())
    for helper in helpers:
        digest.update(b"\0" + (Path(source_file).parent / f"{helper}.py").read_bytes())
    for package in packages:
        try:
            version = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            version = "absent"
        digest.update(f"\0{package}={version}".encode())
    return digest.hexdigest()[:16]


def cache_folder(
    source_file: Path, packages: tuple[str, ...], helpers: tuple[str, ...] = ()
) -> Path | None:
    """Where a module's cached values live, or None when ``PRIVHAR_CACHE_DIR=off``."""
    setting = os.environ.get(CACHE_ENV, "")
    if setting == "off":
        return None
    root = Path(setting) if setting else DEFAULT_FOLDER
    return root / f"{Path(source_file).stem}-{code_digest(source_file, packages, helpers)}"


def disk_cached(
    source_file: str, packages: tuple[str, ...], helpers: tuple[str, ...] = ()
) -> Callable[[Function], Function]:
    """Decorator: ``function`` cached on disk under :func:`cache_folder` (resolved at each call: the tests move it);
    ``helpers`` names the modules beside ``source_file`` whose code its functions call."""

    def decorate(function: Function) -> Function:
        memorised: dict[Path, Callable] = {}

        def cached(*args, **kwargs):  # type: ignore[no-untyped-def]
            folder = cache_folder(Path(source_file), packages, helpers)
            if folder is None:
                return function(*args, **kwargs)
            if folder not in memorised:
                import joblib

                memorised[folder] = joblib.Memory(folder, verbose=0).cache(function)
            return memorised[folder](*args, **kwargs)

        cached.__wrapped__ = function  # type: ignore[attr-defined]
        cached.__doc__, cached.__name__ = function.__doc__, function.__name__
        return cached  # type: ignore[return-value]

    return decorate
