"""``privhar bench anonymize``: coverage and frames/s of each people source on real footage, on this machine.

It runs three stages (the index, decode, anonymize) in turn, so it lives above them, with the runners.

The footage is a UCF101-shaped folder (``make footage`` cuts OpenCV's ``vtest.avi`` into one).
It is decoded once with params.yaml's ``decode`` section; then each source — every detector
alone and the ensemble — removes people with ``avatar`` at ``min_coverage`` 0 (so every clip's
coverage is measured, none held back), and the clips that would fall below params.yaml's
``anonymize.min_coverage`` are counted. frames/s is the stage's own measure (detectors and the
method, one core per worker). Not a test: numbers depend on the machine, so the record names it.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import platform
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from tasks.core.params import read_params_file
from tasks.core.storage import atomic_write_bytes

log = logging.getLogger(__name__)


def sources(ensemble: list[str]) -> dict[str, dict[str, Any]]:
    """Each detector alone, then the ensemble (mediapipe only where it is installed: it lives in its own environment)."""
    found = {
        "motion": {"source": "motion"},
        "hog": {"source": "ensemble", "ensemble": ["hog"]},
        "faces": {"source": "ensemble", "ensemble": ["faces"]},
    }
    has_mediapipe = importlib.util.find_spec("mediapipe") is not None
    if has_mediapipe:
        found["mediapipe"] = {"source": "detector"}
    members = [name for name in ensemble if has_mediapipe or name != "mediapipe"]
    found["ensemble (" + " + ".join(members) + ")"] = {"source": "ensemble", "ensemble": members}
    return found


def run_bench(*, root: Path, params_path: Path, out: Path) -> dict[str, Any]:
    """Decode the footage under ``root``, run every source, write the record to ``out`` (JSON) and return it."""
    from tasks.anonymize.stage import anonymize
    from tasks.decode import decode
    from tasks.synthesize import synthesize

    params = read_params_file(params_path)
    threshold = float(params["anonymize"]["min_coverage"])
    with tempfile.TemporaryDirectory(prefix="privhar-bench-") as scratch:
        folder = Path(scratch)
        os.environ["MLFLOW_TRACKING_URI"] = (
            f"sqlite:///{folder / 'mlflow.db'}"  # not the project's runs
        )
        params["data"] = {
            **params["data"],
            "source": "ucf101",
            "root": str(root.resolve()),
            "split": 1,
        }
        params["base"]["workers"] = 1
        base_params = folder / "params.yaml"
        base_params.write_text(yaml.safe_dump(params))
        synthesize(params_path=base_params, out=folder / "source")
        decoded = decode(params_path=base_params, source=folder / "source", out=folder / "decode")
        results = []
        for name, settings in sources(params["anonymize"]["ensemble"]).items():
            trial = {
                **params,
                "anonymize": {
                    **params["anonymize"],
                    **settings,
                    "methods": ["avatar"],
                    "min_coverage": 0.0,
                },
            }
            trial_params = folder / f"{len(results)}.yaml"
            trial_params.write_text(yaml.safe_dump(trial))
            speed_path = folder / f"{len(results)}.json"
            rows = anonymize(
                params_path=trial_params,
                frames=folder / "decode",
                method="avatar",
                out=folder / f"avatar-{len(results)}",
                speed_path=speed_path,
            )
            covered = [row["coverage"] for row in rows]
            results.append(
                {
                    "source": name,
                    "clips": len(rows),
                    "coverage_min": round(min(covered), 4),
                    "coverage_mean": round(float(np.mean(covered)), 4),
                    "below_min_coverage": sum(value < threshold for value in covered),
                    "frames_per_second": json.loads(speed_path.read_text())["frames_per_second"],
                }
            )
            log.info(
                "bench anonymize: %s: coverage min %.3f mean %.3f, %d of %d clips below %.2f, %.1f frames/s",
                name,
                results[-1]["coverage_min"],
                results[-1]["coverage_mean"],
                results[-1]["below_min_coverage"],
                len(rows),
                threshold,
                results[-1]["frames_per_second"],
            )
    record = {
        "footage": str(root),
        "clips": len(decoded),
        "decode": params["decode"],
        "min_coverage": threshold,
        "method": "avatar",
        "machine": {
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "processor": platform.processor() or platform.machine(),
        },
        "measured": "frames/s of the anonymize stage: the people source and the method, one core",
        "sources": results,
    }
    atomic_write_bytes(out, (json.dumps(record, indent=2) + "\n").encode())
    return record
