"""Params the dataset cannot serve are refused at the index, in one line, before any later stage runs (issue 32)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tasks.core.errors import PrivharError
from tasks.core.params_files import DatasetSections, load_dataset_sections, load_section
from tasks.video_data.dataset_checks import check_against_dataset
from tests.conftest import REPO, write_params


def write_sections(folder: Path, overrides: dict | None = None) -> DatasetSections:
    """The dataset checks' sections of the tiny params.yaml with ``overrides``."""
    return load_dataset_sections(write_params(folder, overrides))


def rows(people: int = 6, per_person: int = 4, test: int = 2) -> list[dict]:
    """``people`` subjects with ``per_person`` training videos over 3 actions, and ``test`` test videos."""
    train = [
        {
            "video_id": f"v{person}_{index}",
            "split": "train",
            "label": (person + index) % 3,
            "identity": person,
        }
        for person in range(people)
        for index in range(per_person)
    ]
    return train + [
        {"video_id": f"t{index}", "split": "test", "label": index % 3, "identity": 100 + index}
        for index in range(test)
    ]


def test_params_that_fit_pass(tmp_path):
    check_against_dataset(write_sections(tmp_path), rows(), "index", 0)


@pytest.mark.parametrize(
    ("overrides", "data", "message"),
    [
        (
            {},
            rows(test=0),
            r"^index: no video in the test split \(check data.split and the split lists\)$",
        ),
        (
            {"private": {"delta": 0.1, "methods": ["dp_sgd"]}},
            rows(),
            r"^private.delta = 0.1 is invalid for dp_sgd: expected δ < 1/N = 0.0417 \(N = 24 training videos in this dataset\)$",
        ),
        (
            {"private": {"delta": 0.1, "methods": ["dp_sgd_person"]}},
            rows(people=12, per_person=1),
            r"^private.delta = 0.1 is invalid for dp_sgd_person: expected δ < 1/N = 0.0833 \(N = 12 training persons",
        ),
        (
            {"federated": {"clients": 8, "partition": "by_identity"}},
            rows(),
            r"^federated.partition = by_identity: client \d of 8 got no training video \(6 people for 8 clients\)",
        ),
        (
            {"federated": {"clients": 3, "partition": "iid", "delta": 0.2}},
            rows(),
            r"^federated.delta = 0.2 is invalid: expected δ < 1/N_k = 0.125 \(with federated.clients = 3, the smallest client holds 8",
        ),
        (
            {
                "ldp": {"video_first_filters": 4},
                "synthesize": {"actions": ["walk", "wave", "squat"]},
            },
            rows(),
            r"^params.yaml: ldp.video_first_filters = 4 and ldp.video_second_filters = 2 must not exceed the 3 actions",
        ),
    ],
)
def test_params_the_dataset_cannot_serve_are_one_line_errors(tmp_path, overrides, data, message):
    with pytest.raises(PrivharError, match=message):
        check_against_dataset(write_sections(tmp_path, overrides), data, "index", 0)


def test_one_action_is_a_warning_not_a_refusal(tmp_path, caplog):
    """One action of real footage still runs the protections and their measures (tests/data/vtest)."""
    one = [row for row in rows() if row["label"] == 0 or row["split"] == "test"]
    with caplog.at_level("WARNING"):
        check_against_dataset(write_sections(tmp_path), one, "index", 0)
    assert (
        "the train split holds 1 action: the classifiers will have nothing to tell apart"
        in caplog.text
    )


def timed(rows: list[dict], seconds: float, size: tuple[int, int] = (240, 320)) -> list[dict]:
    """``rows`` with container headers: every video ``seconds`` long at 25 fps and ``size`` (height, width)."""
    return [
        {**row, "n_frames": int(seconds * 25), "fps": 25.0, "height": size[0], "width": size[1]}
        for row in rows
    ]


@pytest.mark.parametrize(
    ("overrides", "data", "message"),
    [
        (
            {"decode": {"frames": 40, "fps": 4.0}},
            timed(rows(), 3.0),
            r"^params.yaml: decode.frames = 40 at decode.fps = 4.0 asks for 10 s a clip, longer than every video of "
            r"index \(the longest: 3 s\)",
        ),
        (
            {"decode": {"frame_size": [48, 64]}, "train": {"input_size": [72, 96]}},
            rows(),
            r"^params.yaml: train.input_size = \[72, 96\] must not exceed decode.frame_size = \[48, 64\]",
        ),
    ],
)
def test_clip_shapes_the_dataset_cannot_serve(tmp_path, overrides, data, message):
    with pytest.raises(PrivharError, match=message):
        check_against_dataset(write_sections(tmp_path, overrides), data, "index", 0)


def test_short_and_small_videos_are_warnings(tmp_path, caplog):
    data = timed(rows(), 1.0, size=(20, 30))
    data[0] = {**data[0], "n_frames": 100}  # one 4 s video: the 2 s clip fits it
    with caplog.at_level("WARNING"):
        check_against_dataset(
            write_sections(tmp_path, {"decode": {"frames": 8, "fps": 4.0}}), data, "index", 0
        )
    assert "25 of 26 videos are shorter than the 2 s clip" in caplog.text
    assert "26 videos are smaller than decode.frame_size" in caplog.text


def test_a_test_action_the_train_split_lacks_is_a_warning(tmp_path, caplog):
    data = [row for row in rows() if row["split"] == "test" or row["label"] != 1]
    with caplog.at_level("WARNING"):
        check_against_dataset(write_sections(tmp_path), data, "index", 0)
    assert "the test split holds actions the train split has no video of: 1 " in caplog.text


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"decode": {"frames": 100_000_000}},
            r"^params.yaml: decode.frames × decode.frame_size \(one video's decoded frames, uint8 RGB\) needs "
            r"[\d,.]+ GiB for index, more than this machine's [\d,.]+ GiB; lower it$",
        ),
        (
            {"ldp": {"video_crop": [4096, 4096]}},
            r"^params.yaml: ldp.video_crop × ldp.video_first_filters over a split's videos \(DCAConv's first maps, "
            r"float64\) needs [\d,.]+ GiB",
        ),
    ],
)
def test_sizes_this_machine_cannot_hold_are_refused_before_the_work(tmp_path, overrides, message):
    """issue 35: ldp.video_crop [4096, 4096] was OOM-killed at 24 GB, decode.frames 1e8 a MemoryError traceback."""
    many = rows(
        people=400, per_person=10
    )  # 4000 training videos: 4000 × 2 filters × 4096² × 8 bytes = 1 TiB
    with pytest.raises(PrivharError, match=message):
        check_against_dataset(write_sections(tmp_path, overrides), many, "index", 0)


def test_the_default_sizes_fit_with_room():
    from tasks.core.dp_params import LdpParams
    from tasks.core.params import DecodeParams, TrainParams
    from tasks.video_data.dataset_checks import largest_arrays, machine_memory

    params = REPO / "params.yaml"
    sizes = largest_arrays(
        load_section(params, "decode", DecodeParams),
        load_section(params, "train", TrainParams),
        load_section(params, "ldp", LdpParams),
        [{"split": "train"}] * 300 + [{"split": "test"}] * 100,
    )
    assert max(sizes.values()) < machine_memory() / 50
