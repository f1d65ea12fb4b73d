"""Issue 32: `privhar flow` on a UCF101-shaped folder of real clips reaches the report and the registry; an HMDB51-shaped
one is indexed, decoded and loads its model-zoo checkpoint as the public model (stage level: the stage functions,
in this process; the DAG after them is the same for every layout, and tests/test_backbones.py trains each backbone a
step).

Each folder is built here from the real footage the project ships (tests/data/vtest: OpenCV's vtest.avi, pedestrians
on a static camera) and from clips this test encodes the way real datasets differ from the synthetic one: mixed frame
sizes and frame rates, a stream title that is not UTF-8 (as in HMDB51), and one file that is not a video at all.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from tasks.synthetic.encode import write_video
from tests.conftest import REPO, fresh_mlflow_store, make_project, sh
from tests.test_video_files import latin1_titled_clip

FOOTAGE = REPO / "tests" / "data" / "vtest"
HAS_MEDIAPIPE = importlib.util.find_spec("mediapipe") is not None


def moving_square(height: int, width: int, frames: int, seed: int) -> np.ndarray:
    """A bright square crossing a noisy grey background: something moves, as an action would."""
    rng = np.random.default_rng(seed)
    clip = rng.integers(60, 90, (frames, height, width, 3), dtype=np.uint8)
    side = height // 4
    for t in range(frames):
        left = int((width - side) * t / max(frames - 1, 1))
        clip[t, height // 3 : height // 3 + side, left : left + side] = 230
    return clip


def real_ucf101(root: Path) -> None:
    """Two actions: the shipped pedestrians (Walking) and encoded clips (Waving) of other sizes and rates, one titled in
    Latin-1, one not a video."""
    (root / "Walking").mkdir(parents=True)
    (root / "Waving").mkdir()
    names = {
        "v_Walking_g01_c01.avi": "v_Walking_g08_c01.avi",
        "v_Walking_g01_c11.avi": "v_Walking_g09_c01.avi",
        "v_Walking_g01_c16.avi": "v_Walking_g01_c01.avi",
    }
    for shipped, name in names.items():
        shutil.copy(FOOTAGE / "Walking" / shipped, root / "Walking" / name)
    write_video(root / "Waving/v_Waving_g08_c01.avi", moving_square(120, 160, 30, 1), fps=25.0)
    write_video(root / "Waving/v_Waving_g09_c01.avi", moving_square(240, 320, 36, 2), fps=30.0)
    latin1_titled_clip(root / "Waving/v_Waving_g01_c01.avi", 96, 128)
    (root / "Waving/v_Waving_g10_c01.avi").write_bytes(b"not a video, though its name says so" * 40)
    (root / "classInd.txt").write_text("1 Walking\n2 Waving\n")
    (root / "trainlist01.txt").write_text(
        "".join(
            f"{name} 1\n"
            for name in (
                "Walking/v_Walking_g08_c01.avi",
                "Walking/v_Walking_g09_c01.avi",
                "Waving/v_Waving_g08_c01.avi",
                "Waving/v_Waving_g09_c01.avi",
                "Waving/v_Waving_g10_c01.avi",
            )
        )
    )
    (root / "testlist01.txt").write_text(
        "Walking/v_Walking_g01_c01.avi\nWaving/v_Waving_g01_c01.avi\n"
    )


def real_hmdb51(root: Path) -> None:
    """The same footage in HMDB51's layout: ``<source>_<action>_<6 meta fields>.avi`` clips, one split file per action
    (1 train, 2 test, 0 unused); the source video (``Street_01``) is the subject."""
    (root / "walk").mkdir(parents=True)
    (root / "wave").mkdir()
    walking = {
        "v_Walking_g01_c01.avi": "Street_08_walk_f_nm_np3_fr_med_0.avi",
        "v_Walking_g01_c11.avi": "Street_09_walk_f_nm_np3_fr_med_1.avi",
        "v_Walking_g01_c16.avi": "Street_01_walk_f_nm_np3_fr_med_2.avi",
    }
    for shipped, name in walking.items():
        shutil.copy(FOOTAGE / "Walking" / shipped, root / "walk" / name)
    write_video(
        root / "wave/Yard_08_wave_u_cm_np1_fr_med_0.avi", moving_square(120, 160, 30, 1), fps=25.0
    )
    write_video(
        root / "wave/Yard_09_wave_u_cm_np1_fr_med_1.avi", moving_square(240, 320, 36, 2), fps=30.0
    )
    latin1_titled_clip(root / "wave/Yard_01_wave_u_cm_np1_fr_med_2.avi", 96, 128)
    (root / "wave/Yard_10_wave_u_cm_np1_fr_bad_3.avi").write_bytes(
        b"not a video, though its name says so" * 40
    )
    write_video(
        root / "wave/Yard_11_wave_u_cm_np1_fr_med_4.avi", moving_square(96, 128, 12, 3), fps=25.0
    )  # split 0
    splits = root / "testTrainMulti_7030_splits"
    splits.mkdir()
    (splits / "walk_test_split1.txt").write_text(
        "Street_08_walk_f_nm_np3_fr_med_0.avi 1\nStreet_09_walk_f_nm_np3_fr_med_1.avi 1\nStreet_01_walk_f_nm_np3_fr_med_2.avi 2\n"
    )
    (splits / "wave_test_split1.txt").write_text(
        "Yard_08_wave_u_cm_np1_fr_med_0.avi 1\nYard_09_wave_u_cm_np1_fr_med_1.avi 1\nYard_10_wave_u_cm_np1_fr_bad_3.avi 1\n"
        "Yard_01_wave_u_cm_np1_fr_med_2.avi 2\nYard_11_wave_u_cm_np1_fr_med_4.avi 0\n"
    )


LAYOUTS = {
    "ucf101": (real_ucf101, "v_Waving_g10_c01"),
    "hmdb51": (real_hmdb51, "Yard_10_wave_u_cm_np1_fr_bad_3"),
}
# issue 34: each folder trains a model-zoo backbone from a checkpoint in its source's layout, at a tiny clip of its own
BACKBONE_OF = {"ucf101": "x3d_xs", "hmdb51": "r2plus1d_r18"}
TINY_CLIP = {"frames": 4, "crop": 32}


def zoo_checkpoint(name: str, path: Path) -> None:
    """A checkpoint of backbone ``name`` for 7 classes (not the folder's): pytorchvideo's zoo keeps ``model_state``,
    torchvision a bare state dict."""
    import torch

    from tasks.core.clip_shapes import zoo_clip
    from tasks.video_models.backbones import BACKBONES

    torch.manual_seed(3)
    state = (
        BACKBONES[name]
        .build(7, zoo_clip(name, TINY_CLIP["frames"], TINY_CLIP["crop"]))
        .state_dict()
    )
    torch.save(state if name == "r2plus1d_r18" else {"model_state": state}, path)


def real_project(folder: Path, layout: str) -> Path:
    """A tiny project over a ``layout``-shaped folder of real clips, training its layout's backbone from a checkpoint,
    logging to an MLflow store of its own (its 2-class models must not become the session store's champions)."""
    build, _ = LAYOUTS[layout]
    build(folder / "videos")
    backbone = BACKBONE_OF[layout]
    zoo_checkpoint(backbone, folder / "weights.pt")
    ensemble = (
        ["mediapipe", "hog", "motion", "faces"] if HAS_MEDIAPIPE else ["hog", "motion", "faces"]
    )
    (folder / "project").mkdir()
    return make_project(
        folder / "project",
        {
            "data": {"source": layout, "root": str(folder / "videos"), "split": 1},
            "decode": {
                "max_failed_fraction": 0.3
            },  # the one bad file of seven is quarantined, not fatal
            "anonymize": {
                # one method through the DAG: each method's own work on real footage is tests/test_real_footage.py's
                "methods": ["avatar"],
                "ensemble": ensemble,
                "min_coverage": 0.0,
            },
            "report": {"seeds": 1},
            "model": {"backbone": backbone, "weights": str(folder / "weights.pt"), **TINY_CLIP},
            # HMDB51: the checkpoint is the public model as it is (public.epochs 0, as profiles/hmdb51.yaml);
            # UCF101: pretrained on the public set from the checkpoint
            "public": {"epochs": 0 if layout == "hmdb51" else 1},
        },
    )


def own_store(project: Path) -> pytest.MonkeyPatch:
    patch = pytest.MonkeyPatch()
    patch.setenv("MLFLOW_TRACKING_URI", fresh_mlflow_store(project))
    return patch


@pytest.fixture(scope="module")
def ucf101(tmp_path_factory, prefect_api) -> tuple[Path, str]:
    """The suite's one end-to-end run on real clips: ``privhar flow`` (what ``make run`` runs) over the whole DAG; what
    it printed (its scores) and logged (each stage's DVC output). It runs on the session's Prefect server: the shared
    pipeline run is the one that starts its project's own."""
    project = real_project(tmp_path_factory.mktemp("ucf101"), "ucf101")
    patch = own_store(project)
    try:
        done = sh("privhar", "flow", cwd=project, timeout=1500)
        return project, done.stdout + done.stderr
    finally:
        patch.undo()


@pytest.fixture(scope="module")
def hmdb51(tmp_path_factory) -> Path:
    """An HMDB51-shaped folder through the stages that read it, called here (stage level; the UCF101 run is the
    DVC one): the index, decode, and the public model kept from the checkpoint (public.epochs 0) at the decoded clip.
    The public set itself is the same for every layout, so its place is taken by the folder's own decoded clips."""
    from flows.stage_commands import stage_call

    decode = stage_call("decode")
    synthesize = stage_call("synthesize")
    train = stage_call("train")

    project = real_project(tmp_path_factory.mktemp("hmdb51"), "hmdb51")
    params, data = project / "params.yaml", project / "data"
    patch = own_store(project)
    try:
        synthesize(params_path=params, out=data / "synthesize")
        decode(params_path=params, source=data / "synthesize", out=data / "decode")
        train(
            params_path=params,
            frames=data / "decode",
            out=data / "pretrain" / "public",
            report=project / "reports" / "train",
            family="public",
            epochs=0,
        )
    finally:
        patch.undo()
    return project


def check_index_and_decode(project: Path, source: str) -> None:
    """The bad file quarantined, subjects from the file names, split 0 left out, the backbone's clip decoded."""
    quarantined = {
        row["video_id"]: row["reason"]
        for row in _parquet(project / "data/decode/quarantine.parquet")
    }
    assert list(quarantined) == [LAYOUTS[source][1]]
    subjects = {
        row["video_id"]: row["subject"]
        for row in _parquet(project / "data/synthesize/manifest.parquet")
    }
    assert all(
        subjects.values()
    )  # UCF101: the group within its action (Walking_g08); HMDB51: the source video (Street_08)
    assert subjects.get("v_Walking_g08_c01", "Walking_g08") == "Walking_g08"
    assert subjects.get("Street_08_walk_f_nm_np3_fr_med_0", "Street_08") == "Street_08"
    assert "Yard_11_wave_u_cm_np1_fr_med_4" not in subjects  # split 0: in neither split
    # the backbone's clip, from the model zoo's sampling (x3d_xs: every 12th frame of 30 fps; R(2+1)-D: every 2nd)
    decoded = _parquet(project / "data/decode/manifest.parquet")
    assert {(row["n_frames"], row["height"], row["width"]) for row in decoded} == {(4, 32, 42)}
    backbone = BACKBONE_OF[source]
    assert {row["fps"] for row in decoded} == {30.0 / (12 if backbone == "x3d_xs" else 2)}


def check_backbone(project: Path, source: str, models: tuple[str, ...]) -> None:
    """Every model is the layout's backbone at the decoded clip; public.epochs 0 keeps the checkpoint, an epoch
    changes it."""
    import torch

    backbone = BACKBONE_OF[source]
    for folder in models:
        config = torch.load(project / "data" / folder / "model.pt", weights_only=True)["config"]
        assert config["backbone"] == backbone and config["input_size"] == [32, 42], folder
    public = torch.load(project / "data/pretrain/public/model.pt", weights_only=True)["state_dict"]
    weights = torch.load(project.parent / "weights.pt", weights_only=True)
    stem = (
        torch.equal(public["blocks.1.0.weight"], weights["stem.0.weight"])
        if backbone == "r2plus1d_r18"
        else torch.equal(
            public["blocks.1.conv.conv_t.weight"],
            weights["model_state"]["blocks.0.conv.conv_t.weight"],
        )
    )
    assert stem is (backbone == "r2plus1d_r18")


def test_a_real_folder_runs_to_the_report_and_the_registry(ucf101):
    project, printed = ucf101
    assert "Running stage 'report'" in printed and "Running stage 'register'" in printed
    check_index_and_decode(project, "ucf101")
    results = (project / "reports/results.md").read_text()
    assert "| none (raw clips)" in results and "not run" not in results
    signature = json.loads((project / "reports/assess/signature.json").read_text())
    assert (
        signature["raw"]["cmap_raw_attacker"] is None
    )  # no attributes on real footage: n/m in results.md, not a crash
    with (project / "reports/report/table1.csv").open() as handle:
        assert {row["method"] for row in csv.DictReader(handle)} >= {
            "none (raw clips)",
            "anonymize: avatar",
        }
    metrics = json.loads((project / "reports/evaluate/metrics.json").read_text())
    assert 0.0 <= metrics["baseline"]["top1"] <= 1.0
    check_backbone(
        project, "ucf101", ("pretrain/public", "train/baseline", "private/dp_sgd/dp_sgd-eps2.0")
    )
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{project / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("privhar-tests")
    parent = client.search_runs([experiment.experiment_id], "tags.`privhar.pipeline` = 'true'")[0]
    children = client.search_runs(
        [experiment.experiment_id], f"tags.mlflow.parentRunId = '{parent.info.run_id}'"
    )
    assert parent.data.tags["privhar.orchestrator"] == "prefect flow" and children
    trained = {key for key in metrics}  # every stage that trains, scored
    assert {"baseline", "dp_sgd-eps2.0", "anonymize-avatar"} <= trained, sorted(trained)
    assert any(key.startswith("maskdp") for key in trained) and any(
        "fedavg" in key for key in trained
    ), sorted(trained)


def test_an_hmdb51_folder_is_indexed_decoded_and_loads_its_checkpoint(hmdb51):
    check_index_and_decode(hmdb51, "hmdb51")
    check_backbone(hmdb51, "hmdb51", ("pretrain/public",))


def _parquet(path: Path) -> list[dict]:
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist()


def test_params_the_dataset_cannot_serve_stop_the_run_after_the_index(tmp_path, prefect_api):
    """More federated clients than the folder has training videos: `privhar flow` refuses in one line once the index is built,
    before decode or any stage that learns (issue 32: such params were refused minutes later, by their own stage). The
    flow runs on the session's Prefect server (PREFECT_API_URL), as on a `privhar serve` that is up."""
    import os
    import subprocess

    from tests.conftest import BIN

    real_ucf101(tmp_path / "videos")
    (tmp_path / "project").mkdir()
    project = make_project(
        tmp_path / "project",
        {
            "data": {"source": "ucf101", "root": str(tmp_path / "videos"), "split": 1},
            "federated": {"clients": 9, "partition": "by_identity"},
        },
    )
    env = {
        **os.environ,
        "MLFLOW_TRACKING_URI": fresh_mlflow_store(project),
        "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
    }
    result = subprocess.run(
        [str(BIN / "privhar"), "flow"],
        cwd=project,
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert result.returncode == 1
    assert (
        "Running stage 'synthesize'" in result.stderr
        and "Running stage 'decode'" not in result.stderr
    )
    errors = [line for line in result.stderr.splitlines() if line.startswith("privhar: error")]
    assert len(errors) == 1 and errors[0].startswith(
        "privhar: error: federated.clients = 9 is more than the 5 training videos: every client needs at least one"
    ), errors
    assert "Traceback" not in result.stderr
