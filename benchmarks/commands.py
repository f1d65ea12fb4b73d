"""``privhar bench``: the benchmarks' command line, a thin entry to the modules of this folder (timings on this machine,
written as JSON, never part of a run or of the tests' assertions)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from flows.click_options import (
    DETECT_EVERY,
    DETECT_SCALE,
    DETECTORS,
    PARAMS,
    PROJECTION_K,
    writable,
)
from tasks.core.clip_shapes import BACKBONE_NAMES, OWN

F = TypeVar("F", bound=Callable[..., Any])


def bench_out(name: str, help: str = "Where to write the result (JSON).") -> Callable[[F], F]:
    """A benchmark's ``--out``: ``reports/bench/NAME`` by default, checked writable before the benchmark runs."""
    return click.option(
        "--out",
        type=click.Path(path_type=Path, dir_okay=False),
        default=Path("reports/bench") / name,
        show_default=True,
        callback=writable,
        help=help,
    )


def existing_folder(name: str, default: Any, help: str, **more: Any) -> Callable[[F], F]:
    """An option naming a folder that must exist (a run's data a benchmark reads)."""
    return click.option(
        name,
        type=click.Path(path_type=Path, file_okay=False, exists=True),
        default=default,
        show_default=True,
        help=help,
        **more,
    )


BENCH_DEVICE = click.option(
    "--device",
    default="auto",
    show_default=True,
    help="auto | cpu | cuda | cuda:N (as base.device); the JSON names the device and its matmul rate.",
)


PROTECT_METHODS = click.option(
    "--methods",
    default="face_blur,blackout,avatar",
    show_default=True,
    help="privhar protect's methods, comma-separated.",
)


@click.group("bench")
def bench() -> None:
    """Benchmarks: timings on this machine, written as JSON (never part of the tests)."""


@bench.command("dprp")
@click.option(
    "--frames", type=int, default=180, show_default=True, help="T (a 7 s UCF101 clip at 25 fps)."
)
@click.option(
    "--size", type=(int, int), default=(240, 320), show_default=True, help="Frame height and width."
)
@PROJECTION_K
@bench_out("dprp.json")
@BENCH_DEVICE
def bench_dprp_command(frames: int, size: tuple[int, int], k: str, out: Path, device: str) -> None:
    """Per-video seconds of Video-DPRP (both projection modes), its GFLOP/s and the device's matmul rate."""
    import json

    from benchmarks.dprp import run_bench
    from tasks.dprp.single_video import parse_k
    from tasks.video_models.device import resolve_device

    record = run_bench(
        frames=frames,
        height=size[0],
        width=size[1],
        k=parse_k(k),
        epsilon=8.0,
        delta=1e-4,
        budget_split=0.8,
        out=out,
        device=resolve_device(device, "--device"),
    )
    click.echo(json.dumps(record, indent=2))


@bench.command("private")
@click.option(
    "--backbone",
    type=click.Choice(BACKBONE_NAMES),
    default=OWN,
    show_default=True,
    help="The network (model.backbone): privhar's classifier, or a model-zoo backbone, DP-ready, at its own clip.",
)
@click.option(
    "--batch", type=int, default=16, show_default=True, help="Logical batch (train.batch_size)."
)
@click.option(
    "--frames", type=int, default=None, help="Frames per clip [privhar: 8; a backbone: its own]."
)
@click.option(
    "--size",
    type=(int, int),
    default=None,
    help="Frame height and width [privhar: 96 128; a backbone: its own crop, 4:3 frames; its crop is the height].",
)
@click.option("--width", type=int, default=16, show_default=True, help="Model width (train.width).")
@click.option("--repeats", type=int, default=5, show_default=True)
@click.option("--warmup", type=int, default=2, show_default=True)
@bench_out(
    "private.json", help="Where to write the result (JSON) [a backbone: private-<backbone>.json]."
)
@BENCH_DEVICE
def bench_private_command(
    backbone: str,
    batch: int,
    frames: int | None,
    size: tuple[int, int] | None,
    width: int,
    repeats: int,
    warmup: int,
    out: Path,
    device: str,
) -> None:
    """Seconds per logical batch: non-private SGD, DP-SGD (each Opacus per-sample gradient mode), selective DP-SGD."""
    import json

    from benchmarks.private import run_bench
    from tasks.video_models.device import resolve_device

    own = backbone == OWN
    if not own and out == Path("reports/bench/private.json"):
        out = out.with_name(f"private-{backbone}.json")
    height, frame_width = size or ((96, 128) if own else (0, 0))
    record = run_bench(
        batch=batch,
        frames=frames or (8 if own else 0),
        height=height,
        width=frame_width,
        model_width=width,
        warmup=warmup,
        repeats=repeats,
        out=out,
        device=resolve_device(device, "--device"),
        backbone=backbone,
    )
    click.echo(json.dumps(record, indent=2))


@bench.command("anonymize")
@existing_folder(
    "--root",
    Path("data/footage/vtest"),
    "A UCF101-shaped folder of real footage (make footage cuts one).",
)
@PARAMS
@bench_out("anonymize.json")
def bench_anonymize_command(root: Path, params_path: Path, out: Path) -> None:
    """Coverage of the moving pixels and frames/s of each people source (and the ensemble) on real footage."""
    import json

    from benchmarks.anonymize import run_bench

    click.echo(json.dumps(run_bench(root=root, params_path=params_path, out=out), indent=2))


@bench.command("protect")
@click.argument(
    "folders",
    nargs=-1,
    required=True,
    type=click.Path(path_type=Path, file_okay=False, exists=True),
)
@PROTECT_METHODS
@click.option(
    "--deface",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    help="A deface executable (pip install deface in its own venv), run on the same clips.",
)
@DETECTORS
@DETECT_EVERY
@DETECT_SCALE
@PARAMS
@bench_out("protect.json")
def bench_protect_command(
    folders: tuple[Path, ...],
    methods: str,
    deface: Path | None,
    params_path: Path,
    out: Path,
    **options: Any,
) -> None:
    """frames/s, faces released (by an independent judge) and frame share changed of privhar protect's methods on
    FOLDERS of real clips, beside deface's."""
    from benchmarks.protect import run_bench

    record = run_bench(
        folders=list(folders),
        methods=methods.split(","),
        params_path=params_path,
        deface=deface,
        out=out,
        **options,
    )
    summary = {
        folder: {
            name: {k: v for k, v in row.items() if k != "clips"}
            for name, row in rows["rows"].items()
        }
        for folder, rows in record["folders"].items()
    }
    click.echo(json.dumps(summary, indent=2))


@bench.command("protect-memory")
@click.argument("source", type=click.Path(path_type=Path, dir_okay=False, exists=True))
@PROTECT_METHODS
@click.option("--seconds", type=click.FloatRange(0.1, 60.0), default=4.0, show_default=True)
@bench_out("protect-memory.json")
def bench_protect_memory_command(source: Path, methods: str, seconds: float, out: Path) -> None:
    """Peak memory of privhar protect on SOURCE (a real clip) looped and resized to 1080p and 4K, each method in a
    process of its own."""
    from benchmarks.protect_memory import run_memory_bench

    record = run_memory_bench(source, methods.split(","), out, seconds=seconds)
    click.echo(json.dumps(record["sizes"], indent=2))


@bench.command("protect-live")
@click.argument(
    "folder",
    type=click.Path(path_type=Path, file_okay=False, exists=True),
    default="build/bench-footage/native",
)
@PROTECT_METHODS
@click.option(
    "--sizes",
    default="640x360,1280x720",
    show_default=True,
    help="Streams: 640x360 (25 frames/s), 1280x720 (30).",
)
@click.option("--seconds", type=click.FloatRange(1.0, 3600.0), default=600.0, show_default=True)
@DETECTORS
@click.option(
    "--keep",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Keep the streams and the protected segments in this folder [default: a temporary one].",
)
@click.option(
    "--judge/--no-judge",
    default=True,
    show_default=True,
    help="Judge the outputs with MTCNN (needs facenet-pytorch: the detector venv).",
)
@click.option(
    "--judge-every",
    type=click.IntRange(1, None),
    default=None,
    help="Judge every N-th frame of the stream [default: one a second].",
)
@bench_out("protect-live.json")
def bench_protect_live_command(
    folder: Path,
    methods: str,
    sizes: str,
    seconds: float,
    detectors: str,
    keep: Path | None,
    judge: bool,
    judge_every: int | None,
    out: Path,
) -> None:
    """Latency, frames written and faces released of privhar protect on a live stream: FOLDER's clips served on the
    loopback in real time at each size, the outputs judged by an independent face detector."""
    from benchmarks.protect_live import run_live_bench

    clips = sorted(folder.glob("*.mp4"))
    record = run_live_bench(
        clips,
        sizes.split(","),
        methods.split(","),
        seconds,
        out,
        detectors,
        keep,
        judge,
        judge_every,
    )
    click.echo(json.dumps(record["runs"], indent=2))


# a run's raw clips, avatar copy and public model, which the private benches read as train-private does
RUN_INPUTS = (Path("data/decode"), Path("data/anonymize/avatar"), Path("data/pretrain/public"))


@bench.command("maskdp-views")
@PARAMS
@click.option("--seeds", type=click.IntRange(2, 100), default=10, show_default=True)
@bench_out("maskdp_views.json")
def bench_maskdp_views_command(params_path: Path, seeds: int, out: Path) -> None:
    """MaskDP at ε = ∞ against heads trained without noise on its views, unclipped, and on whole clips (after a run:
    reads data/decode, data/anonymize/avatar and data/pretrain/public)."""
    import json

    from benchmarks.maskdp_views import run_bench

    record = run_bench(params_path, *RUN_INPUTS, seeds, out)
    click.echo(json.dumps(record, indent=2))


@bench.command("audit-seeds")
@PARAMS
@click.option("--seeds", type=click.IntRange(2, 100), default=5, show_default=True)
@bench_out("audit_seeds.json")
def bench_audit_seeds_command(params_path: Path, seeds: int, out: Path) -> None:
    """Every DP-SGD release's one-run audit repeated over audit seeds, both bounds (after a run: reads data/decode,
    data/anonymize/avatar and data/pretrain/public)."""
    import json

    from benchmarks.audit_seeds import run_bench

    record = run_bench(params_path, *RUN_INPUTS, seeds, out)
    click.echo(json.dumps(record, indent=2, ensure_ascii=False))


@bench.command("private-recipe")
@PARAMS
@click.option("--seeds", type=click.IntRange(2, 100), default=12, show_default=True)
@existing_folder(
    "--public", Path("data/public/decode"), "The decoded public set (stage decode-public)."
)
@bench_out("private_recipe.json")
def bench_private_recipe_command(params_path: Path, seeds: int, public: Path, out: Path) -> None:
    """Choose the private recipe on public videos alone: a proxy public model on one half of the public people,
    person-level DP-SGD heads on the other half at ε 1 / 2 / 8 / ∞ for each recipe of a grid, then the halves swapped
    (after a run: reads the public set). Prints each recipe's Top-1 averaged over the two proxies."""
    from benchmarks.private_recipe import run_bench

    record = run_bench(params_path, public, seeds, out)
    click.echo(json.dumps(record["cells"], indent=2))


@bench.command("private-selection")
@PARAMS
@bench_out("private_selection.json")
def bench_private_selection_command(params_path: Path, out: Path) -> None:
    """What choosing the recipe on folds of the private data would cost: for a total ε per person, the noise each of
    a random number of trials may use (Papernot & Steinke 2022, dp-accounting's RDP) and the ε one such trial spends
    alone (accounting only: reads params.yaml)."""
    from benchmarks.private_selection import run_bench

    record = run_bench(params_path, out)
    click.echo(json.dumps(record["rows"], indent=2, ensure_ascii=False))


@bench.command("epochs")
@PARAMS
@existing_folder(
    "--frames",
    [Path("data/decode"), Path("data/dprp/eps2.0"), Path("data/anonymize/avatar")],
    "A training folder (its train split is cut into folds); repeat for each.",
    multiple=True,
)
@existing_folder(
    "--init", Path("data/pretrain/public"), "The public model the classifiers fine-tune."
)
@click.option(
    "--candidates",
    default="2,3,4,6,8",
    show_default=True,
    help="Epoch counts to compare, comma-separated.",
)
@click.option("--folds", type=click.IntRange(2, 20), default=5, show_default=True)
@bench_out("epochs.json")
def bench_epochs_command(
    params_path: Path,
    frames: tuple[Path, ...],
    init: Path,
    candidates: str,
    folds: int,
    out: Path,
) -> None:
    """After a run: per training folder, the fewest fine-tuning epochs within one standard error of the best validation
    Top-1 (folds of its train split; the test split is never read): train.epochs_per_family's entry for its family."""
    import json

    from benchmarks.epochs import run_bench
    from flows.stage_readers import section

    try:
        counts = sorted({int(value) for value in candidates.split(",")})
    except ValueError:
        raise click.BadParameter(f"{candidates!r}: expected integers such as 2,4,6") from None
    if not counts or counts[0] < 1:
        raise click.BadParameter(f"{candidates!r}: expected epoch counts >= 1")
    sections = {name: section(params_path, name) for name in ("base", "model", "train")}
    record = run_bench(
        sections=sections, frames=list(frames), init=init, candidates=counts, folds=folds, out=out
    )
    click.echo(json.dumps(record, indent=2))
