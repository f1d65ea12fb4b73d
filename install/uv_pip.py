"""``uv pip install`` into a venv, with the indexes, wheel folders, constraints and certificate pip is configured with.

Why: uv resolves and installs this project in about 30 s where pip takes about 4 minutes (this machine, 2026-11-28),
but uv ignores pip.conf and PIP_* variables, and this machine's pip configuration is what finds the local CPU build of
torch (``find-links``) and caps torch (``constraint``). So the Makefile runs uv through this script, which reads
``pip config list`` and passes the same settings on. ``--index-strategy unsafe-best-match`` makes uv choose the way pip
does: the best version over every index and wheel folder, not the first index that has the package.

Usage: ``python install/uv_pip.py UV VENV_PYTHON REQUIREMENT...`` (the Makefile's install step).
Stdlib only: it runs before anything is installed.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys

_LIST_FLAGS = {  # pip option -> uv flag; each whitespace-separated value gets its own flag
    "find-links": "--find-links",
    "extra-index-url": "--extra-index-url",
    "constraint": "--constraint",
}


def pip_settings(listing: str) -> dict[str, list[str]]:
    """``pip config list`` output (``global.find-links='/opt/wheels'``, ``:env:.constraint='c.txt'``) as option ->
    values, every scope's values kept in order and without repeats (pip itself lets the narrower scope win; for the
    lists uv takes, the union finds the same packages)."""
    settings: dict[str, list[str]] = {}
    for line in listing.splitlines():
        key, separator, quoted = line.partition("=")
        if not separator:
            continue
        option = key.rsplit(".", 1)[-1]
        value = ast.literal_eval(quoted) if quoted[:1] and quoted[0] in "'\"" else quoted
        for item in value.split():
            if item not in settings.setdefault(option, []):
                settings[option].append(item)
    return settings


def uv_arguments(settings: dict[str, list[str]]) -> list[str]:
    """uv's flags for pip's settings: one per find-links folder, extra index and constraint file; the index itself."""
    arguments = []
    for option, flag in _LIST_FLAGS.items():
        for value in settings.get(option, []):
            arguments += [flag, value]
    if settings.get("index-url"):
        arguments += ["--index-url", settings["index-url"][-1]]
    return arguments


def uv_environment(settings: dict[str, list[str]]) -> dict[str, str]:
    """The environment uv runs in: pip's certificate bundle, when it has one, as SSL_CERT_FILE (uv's own variable)."""
    environment = dict(os.environ)
    if settings.get("cert") and "SSL_CERT_FILE" not in environment:
        environment["SSL_CERT_FILE"] = settings["cert"][-1]
    return environment


def main(arguments: list[str]) -> int:
    if len(arguments) < 3:
        print("usage: python install/uv_pip.py UV VENV_PYTHON REQUIREMENT...", file=sys.stderr)
        return 2
    uv, python, *requirements = arguments
    listing = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=False
    ).stdout
    settings = pip_settings(listing)
    command = [
        uv,
        "pip",
        "install",
        "--quiet",
        "--python",
        python,
        "--index-strategy",
        "unsafe-best-match",
    ]
    command += uv_arguments(settings) + requirements
    return subprocess.run(command, env=uv_environment(settings), check=False).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
