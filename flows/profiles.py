"""Params profiles: named overlays on ``params.yaml`` for scheduled or one-off runs.

``profiles/<name>.yaml`` holds only the keys it changes. Applying it edits ``params.yaml``
in the workspace the way ``dvc exp run -S`` does, so DVC sees the changed params, reruns
what they feed, and ``git diff params.yaml`` shows what the run used. The profile
``default`` leaves ``params.yaml`` as it is.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from tasks.core.errors import PrivharError
from tasks.core.params import read_params_file
from tasks.core.storage import atomic_write_bytes

DEFAULT = "default"


def overlay_in_place(document: dict[str, Any], changes: dict[str, Any]) -> None:
    """Merge ``changes`` into ``document``, mapping by mapping (a ruamel document keeps its comments).

    >>> params = {"a": {"x": 1, "y": 2}, "b": 3}
    >>> overlay_in_place(params, {"a": {"y": 5}})
    >>> params
    {'a': {'x': 1, 'y': 5}, 'b': 3}
    """
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(document.get(key), dict):
            overlay_in_place(document[key], value)
        else:
            document[key] = value


def apply_profile(project: Path, name: str) -> bool:
    """Overlay ``profiles/<name>.yaml`` on the project's params.yaml; return whether it changed."""
    if name == DEFAULT:
        return False
    path = Path(project) / "profiles" / f"{name}.yaml"
    if not path.is_file():
        available = sorted(p.stem for p in (Path(project) / "profiles").glob("*.yaml"))
        raise PrivharError(
            f"profile '{name}': {path} not found (profiles: {', '.join([DEFAULT, *available])})"
        )
    changes = read_params_file(path)
    params_path = Path(project) / "params.yaml"
    current = read_params_file(params_path)
    # Round-trip YAML (ruamel, which DVC itself uses) keeps params.yaml's comments and layout.
    from ruamel.yaml import YAML

    document = YAML().load(params_path.read_text())
    overlay_in_place(document, changes)
    if document == current:
        return False
    buffer = io.StringIO()
    YAML().dump(document, buffer)
    atomic_write_bytes(params_path, buffer.getvalue().encode())
    return True
