"""Params profiles: named overlays on ``params.yaml`` for scheduled or one-off runs.

``profiles/<name>.yaml`` holds only the keys it changes. Applying it edits ``params.yaml``
in the workspace the way ``dvc exp run -S`` does, so DVC sees the changed params, reruns
what they feed, and ``git diff params.yaml`` shows what the run used. The profile
``default`` leaves ``params.yaml`` as it is.

The overlaid params are checked, every section, before anything is written: a profile DVC or a
stage would refuse leaves ``params.yaml`` exactly as it was, and its error names the profile
(issue 61: a typo in a profile was written into params.yaml and broke every later run).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from flows.preflight import check_sections
from tasks.core.errors import PrivharError
from tasks.core.params import read_params_file, read_params_text
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


def overlaid(project: Path, name: str) -> tuple[str | None, dict[str, Any]]:
    """The text of ``params.yaml`` with ``profiles/<name>.yaml`` overlaid (None when the profile changes nothing) and
    its mapping, every section checked. Nothing is written. An error in params.yaml itself names params.yaml; one the
    overlay brings in names the profile."""
    params_path = Path(project) / "params.yaml"
    current = read_params_file(params_path)
    check_sections(current, params_path)
    if name == DEFAULT:
        return None, current
    path = Path(project) / "profiles" / f"{name}.yaml"
    if not path.is_file():
        available = sorted(p.stem for p in (Path(project) / "profiles").glob("*.yaml"))
        raise PrivharError(
            f"profile '{name}': {path} not found (profiles: {', '.join([DEFAULT, *available])})"
        )
    read_params_file(path)  # the profile's own YAML and section names, its errors naming it
    # Round-trip YAML (ruamel, which DVC itself uses) keeps params.yaml's comments, layout, quotes and nulls, and
    # the profile's flow-style lists as the profile writes them: `git diff params.yaml` shows the profile's keys
    from ruamel.yaml import YAML

    yaml = YAML()
    yaml.preserve_quotes = True
    yaml.representer.add_representer(
        type(None), lambda dumper, _: dumper.represent_scalar("tag:yaml.org,2002:null", "null")
    )
    document = yaml.load(params_path.read_text())
    overlay_in_place(document, yaml.load(path.read_text()))
    buffer = io.StringIO()
    yaml.dump(document, buffer)
    merged = read_params_text(buffer.getvalue(), path)
    check_sections(merged, path)
    return (None if merged == current else buffer.getvalue()), merged


def check_profile(project: Path, name: str) -> dict[str, Any]:
    """Refuse (one line) a missing profile or params the profile would make invalid, before any work; the params the
    run would read."""
    return overlaid(project, name)[1]


def apply_profile(project: Path, name: str) -> bool:
    """Overlay ``profiles/<name>.yaml`` on the project's params.yaml once it is checked; return whether it changed."""
    text, _ = overlaid(project, name)
    if text is None:
        return False
    atomic_write_bytes(Path(project) / "params.yaml", text.encode())
    return True
