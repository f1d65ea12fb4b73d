"""Stage ``budget``: the privacy budget planned in one place, before any DP stage runs.

Every DP stage checks ``privacy.max_epsilon`` against each person's ε under the releases planned before its
own (:mod:`tasks.privacy.budget`). That verdict depends on every params section with a DP release in it — the
Video-DPRP calibration, the private recipe, the federated clients, the LDP crop — and on the people in the
data. This stage computes each release's person ε once (σ calibrated here, by the same accountants the stages
use, cached on disk) and writes, per DP stage, ``<stage>.json``: the plan's releases up to that stage's last,
with each person's ε. dvc.yaml declares every param the plan reads, and each DP stage depends on its own
file, so a change to any input that moves a verdict reruns the stage that checks it, and only that one.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Annotated, Any

from tasks.core import stage_options as arg
from tasks.core.manifest import MANIFEST_NAME, read_manifest
from tasks.core.params_files import PlanParams
from tasks.core.storage import atomic_directory
from tasks.privacy.budget import plan_files

LOG = logging.getLogger(__name__)


def budget_plan(
    *,
    params: PlanParams,
    workers: int,
    frames: Annotated[Path, arg.folder("Folder of the decoded clips (who is in which video).")],
    out: Annotated[Path, arg.folder("Where to write one <stage>.json per DP stage.", "output")],
) -> dict[str, list[dict[str, Any]]]:
    """Write ``out/<stage>.json`` for every DP stage of the plan; return them. The mechanisms are accounted on
    ``workers`` processes."""
    files = plan_files(params, read_manifest(frames / MANIFEST_NAME), workers)
    with atomic_directory(out) as staging:
        for stage, entries in files.items():
            (staging / f"{stage}.json").write_text(
                json.dumps(entries, indent=1, sort_keys=True) + "\n"
            )
    LOG.info(
        "budget: %d releases planned for %d DP stages in %s",
        max((len(e) for e in files.values()), default=0),
        len(files),
        out,
    )
    return files
