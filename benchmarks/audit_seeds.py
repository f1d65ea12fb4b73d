"""``privhar bench audit-seeds``: every DP-SGD release's one-run audit repeated over audit seeds (issue 86).

``make run`` audits each release once (one extra run per ε: the audits stay a small share of the run). One run's ε̂
moves by tenths between runs (the canaries' draw and the noise), so whether the bounds are sound (never above the
claimed ε) and how far they reach is measured here: each method of ``private.methods`` at each ε of
``private.epsilons``, the stage's own inputs, recipe, trainer and audit (:func:`tasks.private.audit.audit_training`,
``private.audit_canaries``), over ``seeds`` audit seeds, both bounds (Steinke et al.'s (ε, δ) one and, at q = 1, the
f-DP one). Seeded randomness (not private): an audit run is never released, and nothing here is kept but the JSON.
"""

from __future__ import annotations

import json
import logging
import statistics
import time
from pathlib import Path
from typing import Any

from tasks.core.dp_params import PrivateParams
from tasks.core.dp_randomness import DpRandomness
from tasks.core.params import BaseParams
from tasks.core.params_files import load_plan, load_section
from tasks.core.storage import atomic_write_bytes
from tasks.privacy.budget import derived_plan
from tasks.privacy.gradient_canaries import RunAudit
from tasks.private.inputs import PreparedInputs, prepare_inputs
from tasks.private.stage import audit_release

LOG = logging.getLogger(__name__)


def _spread(values: list[float]) -> dict[str, float]:
    return {
        "min": round(min(values), 3),
        "median": round(statistics.median(values), 3),
        "max": round(max(values), 3),
    }


def _audited(
    method: str, inputs: PreparedInputs, params: PrivateParams, epsilon: float, seed: int
) -> RunAudit:
    """One audit run of ``method``'s release at ``epsilon`` as the stage makes it, on audit seed ``seed``'s streams."""
    randomness = DpRandomness("seeded", seed)
    stream = randomness.stream("bench", method, epsilon, "canaries")
    return audit_release(method, inputs, params, epsilon, randomness, stream)


def _row(found: list[RunAudit]) -> dict[str, Any]:
    """The spread of both bounds over one release's audit runs, and whether any passed the claimed ε."""
    claimed = max(run.epsilon_claimed for run in found)
    steinke = [run.found.epsilon_audited for run in found]
    fdp = [run.found.fdp.epsilon for run in found if run.found.fdp is not None]
    return {
        "epsilon_claimed": round(claimed, 4),
        "steinke": _spread(steinke),
        "fdp": _spread(fdp) if fdp else None,
        "sound": max(steinke + fdp) <= claimed,
    }


def run_bench(
    params_path: Path, frames: Path, avatar: Path, init: Path, seeds: int, out: Path
) -> dict[str, Any]:
    """Audit every release ``seeds`` times, write ``out`` (JSON) and return it."""
    base = load_section(params_path, "base", BaseParams)
    params = load_section(params_path, "private", PrivateParams)
    plan = load_plan(params_path)
    shared = (plan.report, plan.privacy, derived_plan(plan))
    unreleased = params.model_copy(update={"epsilons": []})  # nothing released: no budget to check
    record: dict[str, Any] = {
        "seeds": seeds,
        "canaries": params.audit_canaries,
        "confidence": params.audit_confidence,
        "randomness": "seeded (not private): audit runs, never released",
        "methods": {},
    }
    started, auditing = time.perf_counter(), 0.0
    for method in params.methods:
        inputs = prepare_inputs(base, unreleased, *shared, method, frames, init, avatar)
        rows = record["methods"][method] = {}
        for epsilon in params.epsilons:
            begun = time.perf_counter()
            found = [_audited(method, inputs, params, epsilon, seed) for seed in range(seeds)]
            auditing += time.perf_counter() - begun
            rows[repr(epsilon)] = _row(found)
            LOG.info("bench audit-seeds: %s at ε %s: %s", method, epsilon, rows[repr(epsilon)])
    runs = len(params.methods) * len(params.epsilons) * seeds
    record["seconds"] = round(time.perf_counter() - started, 1)
    record["audit_runs"] = runs
    record["seconds_a_run"] = round(auditing / max(runs, 1), 2)  # one release's audit in make run
    atomic_write_bytes(out, (json.dumps(record, indent=2, ensure_ascii=False) + "\n").encode())
    return record
