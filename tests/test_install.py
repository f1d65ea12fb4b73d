"""install/uv_pip.py: uv gets the indexes, wheel folders, constraints and certificate that pip is configured with."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _uv_pip():
    spec = importlib.util.spec_from_file_location("uv_pip", REPO / "install" / "uv_pip.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


LISTING = """\
:env:.find-links='/opt/wheels'
:env:.default-timeout='180'
global.cert='/etc/ssl/certs/ca-certificates.crt'
global.constraint='/etc/xdg/pip/constraints.txt'
global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'
global.find-links='/opt/wheels'
user.index-url='https://mirror.example/simple'
"""


def test_pip_settings_become_uv_flags() -> None:
    uv_pip = _uv_pip()
    settings = uv_pip.pip_settings(LISTING)
    assert settings["find-links"] == ["/opt/wheels"]  # two scopes, one folder
    assert uv_pip.uv_arguments(settings) == [
        "--find-links",
        "/opt/wheels",
        "--extra-index-url",
        "file:///opt/pypi/simple",
        "--extra-index-url",
        "file:///opt/pypi-more/simple",
        "--constraint",
        "/etc/xdg/pip/constraints.txt",
        "--index-url",
        "https://mirror.example/simple",
    ]
    environment = uv_pip.uv_environment(settings)
    if "SSL_CERT_FILE" not in os.environ:
        assert environment["SSL_CERT_FILE"] == "/etc/ssl/certs/ca-certificates.crt"


def test_no_pip_configuration_gives_no_flags() -> None:
    uv_pip = _uv_pip()
    assert uv_pip.uv_arguments(uv_pip.pip_settings("")) == []


def test_this_machines_pip_configuration_is_read() -> None:
    """What the Makefile's install sees here: every find-links folder pip has is passed to uv."""
    uv_pip = _uv_pip()
    listing = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=True
    ).stdout
    settings = uv_pip.pip_settings(listing)
    if not settings.get("find-links"):
        pytest.skip("pip has no find-links here")
    arguments = uv_pip.uv_arguments(settings)
    for folder in settings["find-links"]:
        assert arguments[arguments.index(folder) - 1] == "--find-links"
