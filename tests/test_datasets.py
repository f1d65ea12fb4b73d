"""Real datasets plug in through the same manifest: UCF101 and HMDB51 in their own layouts."""

from pathlib import Path

import numpy as np
import pytest

from flows.stage_commands import stage_call
from tasks.core.errors import PrivharError
from tasks.core.manifest import read_manifest
from tasks.synthetic.encode import write_video
from tasks.video_data.datasets import index_dataset
from tests.conftest import write_params

decode = stage_call("decode")
synthesize = stage_call("synthesize")


def _video(path: Path, frames: int = 10, seed: int = 0) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    write_video(path, rng.integers(0, 255, (frames, 48, 64, 3), dtype=np.uint8), fps=10.0)


def make_ucf101(root: Path, nested_lists: bool = True) -> None:
    videos = {
        "ApplyEyeMakeup": ["v_ApplyEyeMakeup_g01_c01", "v_ApplyEyeMakeup_g08_c01"],
        "Basketball": ["v_Basketball_g01_c01", "v_Basketball_g08_c02"],
    }
    for index, (action, names) in enumerate(videos.items()):
        for number, name in enumerate(names):
            _video(root / action / f"{name}.avi", seed=10 * index + number)
    lists = root / "ucfTrainTestlist" if nested_lists else root
    lists.mkdir(parents=True, exist_ok=True)
    (lists / "classInd.txt").write_text("1 ApplyEyeMakeup\n2 Basketball\n")
    (lists / "trainlist01.txt").write_text(
        "ApplyEyeMakeup/v_ApplyEyeMakeup_g08_c01.avi 1\nBasketball/v_Basketball_g08_c02.avi 2\n"
    )
    (lists / "testlist01.txt").write_text(
        "ApplyEyeMakeup/v_ApplyEyeMakeup_g01_c01.avi\nBasketball/v_Basketball_g01_c01.avi\n"
    )


def make_hmdb51(root: Path) -> None:
    for index, action in enumerate(["brush_hair", "cartwheel"]):
        lines = []
        for number, split in enumerate(["1", "2", "0"]):
            name = f"{action}_clip_{number}.avi"
            _video(root / action / name, seed=10 * index + number)
            lines.append(f"{name} {split}")
        (root / "testTrainMulti_7030_splits").mkdir(parents=True, exist_ok=True)
        (root / "testTrainMulti_7030_splits" / f"{action}_test_split1.txt").write_text(
            "\n".join(lines) + "\n"
        )


@pytest.mark.parametrize("nested", [True, False])
def test_ucf101_layout(tmp_path, nested):
    make_ucf101(tmp_path / "ucf", nested_lists=nested)
    rows = {row["video_id"]: row for row in index_dataset("ucf101", str(tmp_path / "ucf"), 1)}
    assert rows["v_ApplyEyeMakeup_g08_c01"]["split"] == "train"
    assert rows["v_Basketball_g01_c01"]["split"] == "test"
    assert (
        rows["v_Basketball_g01_c01"]["label"] == 1
        and rows["v_Basketball_g01_c01"]["action"] == "Basketball"
    )
    assert rows["v_ApplyEyeMakeup_g01_c01"]["n_frames"] == 10
    assert (
        rows["v_ApplyEyeMakeup_g01_c01"]["height"],
        rows["v_ApplyEyeMakeup_g01_c01"]["width"],
    ) == (48, 64)


def test_hmdb51_layout_skips_unused_videos(tmp_path):
    make_hmdb51(tmp_path / "hmdb")
    rows = {row["video_id"]: row for row in index_dataset("hmdb51", str(tmp_path / "hmdb"), 1)}
    assert set(rows) == {
        "brush_hair_clip_0",
        "brush_hair_clip_1",
        "cartwheel_clip_0",
        "cartwheel_clip_1",
    }
    assert (
        rows["cartwheel_clip_0"]["split"] == "train" and rows["cartwheel_clip_1"]["split"] == "test"
    )
    assert rows["cartwheel_clip_1"]["label"] == 1


def test_missing_split_lists_are_one_line_errors(tmp_path):
    make_ucf101(tmp_path / "ucf")
    with pytest.raises(PrivharError, match="trainlist02.txt not found"):
        index_dataset("ucf101", str(tmp_path / "ucf"), 2)
    make_hmdb51(tmp_path / "hmdb")
    with pytest.raises(PrivharError, match="brush_hair_test_split3.txt not found"):
        index_dataset("hmdb51", str(tmp_path / "hmdb"), 3)
    with pytest.raises(PrivharError, match="data.root is required"):
        index_dataset("hmdb51", None, 1)
    with pytest.raises(PrivharError, match="is not a folder"):
        index_dataset("hmdb51", str(tmp_path / "absent"), 1)


def test_a_split_list_naming_absent_files_is_refused_unless_they_are_to_be_quarantined(tmp_path):
    """Issue 32: a wrong root on a large dataset must not run on with its misses quietly quarantined."""
    make_ucf101(tmp_path / "ucf")
    (tmp_path / "ucf/Basketball/v_Basketball_g01_c01.avi").unlink()
    with pytest.raises(
        PrivharError,
        match=r"split 1 lists 1 of 4 videos that are not there \(first: .*v_Basketball_g01_c01.avi\); "
        r"check data.root, or set data.missing_files: quarantine",
    ):
        index_dataset("ucf101", str(tmp_path / "ucf"), 1)
    rows = index_dataset("ucf101", str(tmp_path / "ucf"), 1, missing_files="quarantine")
    assert len(rows) == 4  # decode quarantines the absent one with its reason ("file not found")


def test_malformed_hmdb_split_line(tmp_path):
    make_hmdb51(tmp_path / "hmdb")
    (tmp_path / "hmdb/testTrainMulti_7030_splits/cartwheel_test_split1.txt").write_text(
        "cartwheel_clip_0.avi train\n"
    )
    with pytest.raises(
        PrivharError, match=r"cartwheel_test_split1.txt:1: expected '<video> <0\|1\|2>'"
    ):
        index_dataset("hmdb51", str(tmp_path / "hmdb"), 1)


def test_real_dataset_runs_through_synthesize_and_decode(tmp_path):
    make_ucf101(tmp_path / "ucf")
    params = write_params(
        tmp_path, {"data": {"source": "ucf101", "root": str(tmp_path / "ucf"), "split": 1}}
    )
    synthesize(params_path=params, out=tmp_path / "source")
    decoded = decode(params_path=params, source=tmp_path / "source", out=tmp_path / "decoded")
    assert len(decoded) == 4
    assert {row["split"] for row in read_manifest(tmp_path / "decoded/manifest.parquet")} == {
        "train",
        "test",
    }
    assert np.load(tmp_path / "decoded" / decoded[0]["path"]).shape == (4, 32, 40, 3)


def test_a_real_datasets_preview_shows_no_frame_unless_show_raw_says_so(tmp_path):
    """Issue 32: under report.show_raw: auto the index stage's preview of real footage (tracked by git) draws no frame
    of the people in it, only what the dataset holds; show_raw: true draws them."""
    import cv2

    make_ucf101(tmp_path / "ucf")
    for show in ("auto", True):
        folder = tmp_path / str(show)
        folder.mkdir()
        params = write_params(
            folder,
            {
                "data": {"source": "ucf101", "root": str(tmp_path / "ucf"), "split": 1},
                "report": {"show_raw": show},
            },
        )
        synthesize(params_path=params, out=folder / "source", report=folder / "report")
        image = cv2.imread(str(folder / "report/preview.png"))
        grey = (image[..., 0] == image[..., 1]).all() and (image[..., 1] == image[..., 2]).all()
        assert grey == (
            show == "auto"
        )  # the clips are colour noise: any frame drawn breaks the grey of text on white


def test_pa_hmdb_style_attributes_join_the_rows(tmp_path):
    make_hmdb51(tmp_path / "hmdb")
    rows = index_dataset("hmdb51", str(tmp_path / "hmdb"), 1)
    table = tmp_path / "attributes.csv"
    table.write_text(
        "video_id,face,skin_tone\n"
        + "".join(f"{row['video_id']},{number % 2},dark\n" for number, row in enumerate(rows))
    )
    merged = index_dataset("hmdb51", str(tmp_path / "hmdb"), 1, str(table))
    assert [row["attr_face"] for row in merged] == [number % 2 == 1 for number in range(len(rows))]
    assert {row["attr_skin_tone"] for row in merged} == {"dark"}
    table.write_text("video_id,face\n" + f"{rows[0]['video_id']},1\n")
    with pytest.raises(
        PrivharError, match=f"attributes.csv: no attributes for {len(rows) - 1} videos of the split"
    ):
        index_dataset("hmdb51", str(tmp_path / "hmdb"), 1, str(table))
    table.write_text(
        "video_id,face\n" + "".join(f"{row['video_id']},1\n" for row in [*rows, rows[0]])
    )
    with pytest.raises(
        PrivharError,
        match=f"attributes.csv: 1 videos listed more than once \\(first: {rows[0]['video_id']}\\)",
    ):
        index_dataset("hmdb51", str(tmp_path / "hmdb"), 1, str(table))


@pytest.mark.parametrize(
    ("list_name", "extra", "message"),
    [
        (
            "trainlist01.txt",
            "ApplyEyeMakeup/v_ApplyEyeMakeup_g08_c01.avi 1\n",
            r"trainlist01.txt:3: v_ApplyEyeMakeup_g08_c01.avi is listed again \(first at .*trainlist01.txt:1\); "
            r"expected once$",
        ),
        (
            "testlist01.txt",
            "ApplyEyeMakeup/v_ApplyEyeMakeup_g08_c01.avi\n",
            r"testlist01.txt:3: v_ApplyEyeMakeup_g08_c01.avi is listed again \(first at .*trainlist01.txt:1\)",
        ),
        (
            "trainlist01.txt",
            "Basketball/v_ApplyEyeMakeup_g01_c01.avi 2\n",
            r"testlist01.txt:1: .*ApplyEyeMakeup/v_ApplyEyeMakeup_g01_c01.avi has the file name of "
            r".*Basketball/v_ApplyEyeMakeup_g01_c01.avi \(listed at .*trainlist01.txt:3\)",
        ),
    ],
)
def test_a_split_list_naming_a_video_twice_is_one_line(tmp_path, list_name, extra, message):
    root = tmp_path / "ucf"
    make_ucf101(root)
    _video(root / "Basketball" / "v_ApplyEyeMakeup_g01_c01.avi")
    lists = root / "ucfTrainTestlist"
    (lists / list_name).write_text((lists / list_name).read_text() + extra)
    with pytest.raises(PrivharError, match=message):
        index_dataset("ucf101", str(root), 1)


def test_class_names_with_spaces_stay_whole(tmp_path):
    root = tmp_path / "ucf"
    for action in ("Apply Eye Makeup", "Basketball"):
        for number in (1, 2):
            _video(root / action / f"v_{action.replace(' ', '')}_g0{number}_c01.avi")
    (root / "classInd.txt").write_text("1 Apply Eye Makeup\n2 Basketball\n")
    (root / "trainlist01.txt").write_text(
        "Apply Eye Makeup/v_ApplyEyeMakeup_g01_c01.avi 1\nBasketball/v_Basketball_g01_c01.avi 2\n"
    )
    (root / "testlist01.txt").write_text(
        "Apply Eye Makeup/v_ApplyEyeMakeup_g02_c01.avi\nBasketball/v_Basketball_g02_c01.avi\n"
    )
    rows = index_dataset("ucf101", str(root), 1)
    assert sorted({(row["action"], row["label"]) for row in rows}) == [
        ("Apply Eye Makeup", 0),
        ("Basketball", 1),
    ]


def test_a_list_not_in_utf8_is_one_line_naming_file_line_and_byte(tmp_path):
    """Issue 35: a latin-1 split list was a UnicodeDecodeError traceback; a UTF-8 byte-order mark is fine."""
    make_ucf101(tmp_path / "ucf")
    lists = tmp_path / "ucf" / "ucfTrainTestlist"
    (lists / "classInd.txt").write_bytes(b"\xef\xbb\xbf1 ApplyEyeMakeup\n2 Basketball\n")
    assert len(index_dataset("ucf101", str(tmp_path / "ucf"), 1)) == 4
    (lists / "testlist01.txt").write_bytes(
        "ApplyEyeMakeup/v_ApplyEyeMakeup_g01_c01.avi\nBasketball/v_Basketball_é.avi\n".encode(
            "latin-1"
        )
    )
    with pytest.raises(PrivharError) as refused:
        index_dataset("ucf101", str(tmp_path / "ucf"), 1)
    assert str(refused.value) == (
        f"{lists / 'testlist01.txt'}:2: not UTF-8 text (byte 0xe9); save the list as UTF-8, as the file names on "
        "disk are"
    )
