"""Params profiles: named overlays on ``params.yaml`` for scheduled or one-off runs.

``profiles/<name>.yaml`` holds only the keys it changes. Applying it edits ``params.yaml``
in the workspace the way ``dvc exp run -S`` does, so DVC sees the changed params, reruns
what they feed, and ``git diff params.yaml`` shows what the run used. The profile
``default`` is ``params.yaml`` as it was before any profile was overlaid (:func:`base_params`).

The overlaid params are checked, every section, before anything is written: a profile DVC or a
stage would refuse leaves ``params.yaml`` exactly as it was, and its error names the profile
(issue 61: a typo in a profile was written into params.yaml and broke every later run).
"""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path
from typing import Any

from flows.preflight import check_sections
from tasks.core.errors import PrivharError
from tasks.core.params_files import read_params_file, read_params_text
from tasks.core.storage import atomic_write_bytes

DEFAULT = "default"
# params.yaml as it was before a profile was overlaid on it, and the overlay written (its profile and digest): a run
# of another profile overlays on the base, not on the last run's settings (issue 82: after `--profile smoke`, the
# nightly "default" run would have run the smoke settings still in params.yaml)
BASE_NAME = Path(".privhar") / "params.base.yaml"
MARK_NAME = Path(".privhar") / "params.profile.json"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def base_params(project: Path) -> tuple[str, str | None]:
    """(params.yaml's text before the profile overlaid on it, that profile), while params.yaml is still exactly the
    overlay written; else (params.yaml's text, None): restored or edited since, it is its own base."""
    current = (Path(project) / "params.yaml").read_text()
    try:
        mark = json.loads((Path(project) / MARK_NAME).read_text())
        base = (Path(project) / BASE_NAME).read_text()
    except (OSError, ValueError):
        return current, None
    if mark.get("sha256") != _digest(current):
        return current, None
    return base, str(mark.get("profile"))


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
    base_text, overlay = base_params(project)
    current = read_params_file(params_path)
    base = current if overlay is None else read_params_text(base_text, Path(project) / BASE_NAME)
    check_sections(base, params_path)
    if name == DEFAULT:
        return (None if base == current else base_text), base
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
    document = yaml.load(base_text)
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
    """Overlay ``profiles/<name>.yaml`` on the project's params.yaml (on its base, where params.yaml is still an
    earlier profile's overlay) once it is checked; return whether params.yaml changed."""
    text, _ = overlaid(project, name)
    if text is None:
        return False
    base_text, _ = base_params(project)
    root = Path(project)
    if name == DEFAULT:  # the base itself: no overlay to remember
        (root / MARK_NAME).unlink(missing_ok=True)
    else:
        atomic_write_bytes(root / BASE_NAME, base_text.encode())
        mark = {"profile": name, "sha256": _digest(text)}
        atomic_write_bytes(root / MARK_NAME, json.dumps(mark).encode())
    atomic_write_bytes(root / "params.yaml", text.encode())
    return True
