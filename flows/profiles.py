"""Params profiles: named overlays on ``params.yaml`` for scheduled or one-off runs.

``profiles/<name>.yaml`` holds only the keys it changes. Applying it edits ``params.yaml``
in the workspace the way ``dvc exp run -S`` does, so DVC sees the changed params, reruns
what they feed, and ``git diff params.yaml`` shows what the run used. The profile
``default`` leaves ``params.yaml`` as it is.
"""

from __future__ import annotations

import copy
import io
from pathlib import Path
from typing import Any

from tasks.core.errors import PrivharError
from tasks.core.params import read_params_file
from tasks.core.storage import atomic_write_bytes

DEFAULT = "default"


def overlay(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``changes`` merged in, mapping by mapping.

    >>> overlay({"a": {"x": 1, "y": 2}, "b": 3}, {"a": {"y": 5}})
    {'a': {'x': 1, 'y': 5}, 'b': 3}
    """
    out = copy.deepcopy(base)
    for key, value in changes.items():
        out[key] = overlay(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def apply_profile(project: Path, name: str) -> bool:
    """Overlay ``profiles/<name>.yaml`` on the project's params.yaml; return whether it changed."""
    if name == DEFAULT:
        return False
    path = Path(project) / "profiles" / f"{name}.yaml"
    if not path.is_file():
        available = sorted(p.stem for p in (Path(project) / "profiles").glob("*.yaml"))
        raise PrivharError(f"profile '{name}': {path} not found (profiles: {', '.join([DEFAULT, *available])})")
    changes = read_params_file(path)
    params_path = Path(project) / "params.yaml"
    current = read_params_file(params_path)
    if overlay(current, changes) == current:
        return False
    # Round-trip YAML (ruamel, which DVC itself uses) keeps params.yaml's comments and layout.
    from ruamel.yaml import YAML

    document = YAML().load(params_path.read_text())
    _update_in_place(document, changes)
    buffer = io.StringIO()
    YAML().dump(document, buffer)
    atomic_write_bytes(params_path, buffer.getvalue().encode())
    return True


def _update_in_place(document: Any, changes: dict[str, Any]) -> None:
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(document.get(key), dict):
            _update_in_place(document[key], value)
        else:
            document[key] = value
