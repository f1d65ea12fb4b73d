"""Stage ``dprp``: every decoded clip (train and test splits) through Video-DPRP at one ε.

    decode manifest ─▶ frames/<id>.npy ─▶ Algorithm 1 (tasks/dprp/mechanism.py) ─▶ frames/<id>.npy
                                                    ├─▶ ledger.parquet: σ1, σ2, ε, δ, split, mode, β per video
                                                    └─▶ report/eps<ε>.png: raw and protected test frames

Both splits are protected: protocol 2 evaluates on protected test videos. ``projection: shared``
draws one public R for the dataset from (base.seed, "dprp-R"); ``per_video`` draws one per video,
secretly from OS entropy under ``privacy.randomness: secure`` (from (base.seed, video_id) when
seeded). The calibration's sensitivity bound follows (tasks/privacy/dprp_calibration.py): χ² for a secret R,
the operator norm for a public one. The noise M, N is fresh per video and ε, secret unless seeded.
Videos go through ``map_ordered``, so the Prefect flow can shard them.
"""

from __future__ import annotations

import logging
import time
from functools import partial
from pathlib import Path
from typing import Annotated, Any

import torch

from tasks.core import stage_options as arg
from tasks.core.dp_params import DprpParams, PrivacyParams
from tasks.core.dp_randomness import DpRandomness
from tasks.core.errors import PrivharError
from tasks.core.item_randomness import derive_seed
from tasks.core.manifest import (
    MANIFEST_NAME,
    read_manifest,
    rebase_path,
    resolve_path,
    write_manifest,
    write_table,
)
from tasks.core.parallel import map_ordered
from tasks.core.params import BaseParams
from tasks.core.speed import write_speed
from tasks.core.storage import atomic_directory, atomic_write_bytes, load_frames, save_frames
from tasks.core.tracking import stage_run, stage_work
from tasks.dprp.audit import audit_copy
from tasks.dprp.mechanism import Projection, fits_comfortably, generator_for, protect_video
from tasks.dprp.preview import preview_png
from tasks.privacy.budget import BudgetPlan, check_budget, record_made
from tasks.privacy.dprp_calibration import NoiseScales, dataset_scales
from tasks.video_data.subjects import named_people
from tasks.video_models.device import resolve_device

LOG = logging.getLogger(__name__)


def projection_for(
    video_id: str,
    *,
    params: DprpParams,
    randomness: DpRandomness,
    d: int,
    shared: Projection | None,
    device: torch.device = torch.device("cpu"),
) -> Projection:
    """The shared R, or this video's own (secret unless the randomness is seeded); on a GPU, R is drawn there."""
    if shared is not None:
        return shared
    return Projection(
        seed=randomness.seed("dprp-R", video_id),
        d=d,
        k=params.k_value,
        block_rows=params.block_rows,
        threads=1,
        keep=fits_comfortably(d, params.k_value),
        device=device,
        generator=generator_for(device, secret=randomness.private),
    )


def protect_one(
    row: dict[str, Any],
    *,
    params: DprpParams,
    scales: NoiseScales,
    epsilon: float,
    randomness: DpRandomness,
    source: Path,
    out: Path,
    final: Path,
    workdir: Path,
    shared: Projection | None,
    device: torch.device = torch.device("cpu"),
) -> dict[str, Any]:
    """One clip: protected frames written, its manifest row (with its privacy record) returned."""
    frames = load_frames(workdir / resolve_path(row["path"], source))
    d = int(frames[0].size)
    projection = projection_for(
        row["video_id"], params=params, randomness=randomness, d=d, shared=shared, device=device
    )
    protected = protect_video(
        frames,
        projection,
        sigma1=scales.sigma1,
        sigma2=scales.sigma2,
        rank=params.rank,
        noise_seed=randomness.seed("dprp-noise", epsilon, row["video_id"]),
    )
    if projection is not shared:
        projection.release()
    save_frames(workdir / out / "frames" / f"{row['video_id']}.npy", protected.frames)
    annotations = rebase_path(row.get("annotations"), workdir / source, workdir / final)
    return {
        **row,
        "path": f"frames/{row['video_id']}.npy",
        "annotations": annotations,
        "projection": params.projection,
        **scales.as_dict(),
        "randomness": randomness.label,
    }


def shared_projection(
    params: DprpParams, base: BaseParams, d: int, device: torch.device
) -> Projection | None:
    """``projection: shared``: the dataset's one public R, built (and its RᵀR computed) before the workers fork, so
    they share it; None for ``per_video``."""
    if params.projection != "shared":
        return None
    shared = Projection(
        seed=derive_seed(base.seed, "dprp-R"),
        d=d,
        k=params.k_value,
        block_rows=params.block_rows,
        keep=True,
        device=device,
        generator=generator_for(device),
    )
    shared.gram()
    return shared


def ledger_rows(
    rows: list[dict[str, Any]],
    scales: NoiseScales,
    randomness: DpRandomness,
    params: DprpParams,
    d: int,
) -> list[dict[str, Any]]:
    """One row per video with the people in it, so the report's person ε groups a person's videos (not one person
    per video)."""
    return [
        {
            "video_id": row["video_id"],
            "split": row["split"],
            "identities": named_people(row),
            **scales.as_dict(),
            "randomness": randomness.label,
            "projection": params.projection,
            "k": params.k_value,
            "d": d,
            "n_frames": int(row["n_frames"]),
        }
        for row in rows
    ]


def _audit(
    params: DprpParams,
    scales: NoiseScales,
    randomness: DpRandomness,
    epsilon: float,
    rows: list[dict[str, Any]],
    d: int,
    shared: Projection | None,
    device: torch.device,
) -> dict[str, Any]:
    """The copy's one-run audit (:mod:`tasks.dprp.audit`) as the ledger's columns; none when ``dprp.audit_frames`` is 0."""
    if not params.audit_frames:
        return {}
    started = time.perf_counter()
    shape = (int(rows[0]["height"]), int(rows[0]["width"]), 3)
    found = audit_copy(
        lambda index: projection_for(
            f"audit-{index}",
            params=params,
            randomness=randomness,
            d=d,
            shared=shared,
            device=device,
        ),
        shared is None,
        shared is None and randomness.private,
        (params.calibration, params.neighbour),
        scales,
        params.rank,
        shape,
        randomness,
        epsilon,
        params.audit_frames,
        params.audit_confidence,
    )
    LOG.info(
        "dprp@%g: %s; ε %.4g; %.1f s",
        epsilon,
        found.summary("canary frames"),
        scales.epsilon,
        time.perf_counter() - started,
    )
    return found.columns()


def _log_run(run: Any, scales: NoiseScales, videos: int, seconds: float) -> None:
    """The calibration into the stage's MLflow run."""
    run.log_metrics(  # ε beside the paper's number (its formula's, labelled)
        {
            "epsilon": scales.epsilon,
            "delta": scales.delta,
            **({} if scales.paper_epsilon is None else {"paper_epsilon": scales.paper_epsilon}),
        }
    )
    run.log_summary(
        {
            "sigma1": scales.sigma1,
            "sigma2": scales.sigma2,
            "videos": videos,
            "seconds_per_video": seconds / videos,
        }
    )
    run.set_tags({"privhar.calibration": scales.calibration, "privhar.neighbour": scales.neighbour})


def _preview(
    report: Path,
    epsilon: float,
    show_raw: bool,
    params: DprpParams,
    scales: NoiseScales,
    rows: list[dict[str, Any]],
    frames: Path,
    protected: list[dict[str, Any]],
    copies: Path,
) -> None:
    """report/eps<ε>.png: test clips raw (where params allow) beside their protected copies, titled with σ1, σ2."""
    test = [row for row in rows if row["split"] == "test"] or rows
    title = (
        f"{scales.label}, δ = {scales.delta:.3g}, k = {params.k_value}, b = {params.budget_split:g}: "
        f"σ1 = {scales.sigma1:.3g}, σ2 = {scales.sigma2:.3g}\n{scales.accountant}"
    )
    atomic_write_bytes(
        report / f"eps{epsilon}.png",
        preview_png(test, frames, protected, copies, title, show_raw=show_raw),
    )


def _log_summary(
    scales: NoiseScales, videos: int, seconds: float, randomness: DpRandomness
) -> None:
    """One line: both ε (the paper's and the one that holds), what they cover, σ1, σ2 and the speed."""
    LOG.info(
        "dprp: ε = %.4g (paper's ε = %s; covers %s; %g for one pixel, %.3g for a whole frame), δ = %.3g: "
        "%d videos, σ1 = %.4g, σ2 = %.4g (%s), %.3f s/video; randomness %s",
        scales.epsilon,
        "n/a" if scales.paper_epsilon is None else f"{scales.paper_epsilon:g}",
        scales.unit,
        scales.epsilon_one_pixel,
        scales.epsilon_whole_frame,
        scales.delta,
        videos,
        scales.sigma1,
        scales.sigma2,
        scales.calibration,
        seconds / videos,
        randomness.label,
    )


def _check_epsilon(params: DprpParams, epsilon: float) -> None:
    if epsilon not in params.epsilons:
        raise PrivharError(
            f"dprp: epsilon {epsilon} is not one of dprp.epsilons = {params.epsilons}"
        )


def _write_speed(
    speed_path: Path | None, rows: list[dict[str, Any]], seconds: float, epsilon: float
) -> None:
    """The measured frames/s, for assess's f_speed."""
    if speed_path is not None:
        write_speed(
            speed_path,
            frames=sum(int(row["n_frames"]) for row in rows),
            seconds=seconds,
            measured=f"dprp ε = {epsilon:g}: projection, noise and reconstruction of every video, one process",
        )


@stage_work
def dprp(
    *,
    base: BaseParams,
    params: DprpParams,
    privacy: PrivacyParams,
    budget: BudgetPlan,
    frames: Annotated[Path, arg.folder("Folder of the decoded clips.")],
    epsilon: Annotated[float, arg.value("Total ε (one of dprp.epsilons).")],
    out: Annotated[
        Path,
        arg.folder(
            "Where to write the protected clips, their manifest and the privacy ledger.", "output"
        ),
    ],
    report: Annotated[
        Path | None,
        arg.folder("Where to write eps<ε>.png (raw and protected test frames).", "output"),
    ] = None,
    show_raw: bool = False,
    speed_path: arg.Speed = None,
) -> list[dict[str, Any]]:
    """Protect every clip of the decoded manifest in ``frames`` at total ``epsilon`` (one of dprp.epsilons), checked
    against ``budget``; preview into ``report`` (raw frames beside the copies if ``show_raw``), measured frames/s into
    ``speed_path``."""
    _check_epsilon(params, epsilon)
    randomness = DpRandomness(privacy.randomness, base.seed)
    rows = read_manifest(frames / MANIFEST_NAME)
    # privacy.max_epsilon, before any work
    check_budget(privacy, f"dprp-eps{epsilon}", rows, budget)
    d = int(rows[0]["height"]) * int(rows[0]["width"]) * 3
    scales = dataset_scales(params, epsilon, d, randomness.private)
    device = resolve_device(base.device)
    shared = shared_projection(params, base, d, device)
    with (
        stage_run(f"dprp@{epsilon:g}", {"base": base, "dprp": params}) as run,
        atomic_directory(out) as staging,
    ):
        (staging / "frames").mkdir()
        started = time.perf_counter()
        work = partial(
            protect_one,
            params=params,
            scales=scales,
            epsilon=epsilon,
            randomness=randomness,
            source=frames,
            out=staging,
            final=out,
            workdir=Path.cwd(),
            shared=shared,
            device=device,
        )
        # One process: torch's matmuls already use every core, and forking after torch's thread
        # pool has started is unsafe. (The Prefect flow may still shard the videos over threads or Dask.)
        protected = map_ordered(work, rows, workers=1, desc=f"dprp ε={epsilon:g}")
        seconds = time.perf_counter() - started
        audited = _audit(params, scales, randomness, epsilon, rows, d, shared, device)
        # each row carries its copy's audit: a model trained on the copy registers ε̂ beside ε (issue 82)
        write_manifest([{**row, **audited} for row in protected], staging / MANIFEST_NAME)
        write_table(
            [{**row, **audited} for row in ledger_rows(rows, scales, randomness, params, d)],
            staging / "ledger.parquet",
        )
        if audited:
            run.log_metrics({"epsilon_audited": audited["epsilon_audited"]})
        _log_run(run, scales, len(protected), seconds)
        _log_summary(scales, len(protected), seconds, randomness)
    # the side reports once the copy is in place: a stage that failed leaves none at their tracked paths (issue 82)
    _write_speed(speed_path, rows, seconds, epsilon)
    if report is not None:
        _preview(report, epsilon, show_raw, params, scales, rows, frames, protected, out)
    # the copy is complete: a release made, in the budget's ledger
    record_made(privacy, f"dprp-eps{epsilon}", rows, budget)
    return protected
