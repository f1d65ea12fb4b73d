"""The real dataset's file listing follows symbolic links and refuses a link loop (issue 35)."""

from __future__ import annotations

import os

import pytest

from tasks.core.errors import PrivharError
from tasks.core.params import DataParams
from tasks.core.params_files import load_section
from tasks.scan import dataset_files
from tests.conftest import sections, write_params


def data_params(tmp_path, root) -> DataParams:
    path = write_params(tmp_path, {"data": {"source": "ucf101", "root": str(root)}})
    return load_section(path, "data", DataParams)


def test_a_video_replaced_inside_a_linked_class_folder_changes_the_listing(tmp_path):
    elsewhere = tmp_path / "disk2" / "Walking"
    elsewhere.mkdir(parents=True)
    (elsewhere / "v_Walking_g01_c01.avi").write_bytes(b"first video")
    root = tmp_path / "dataset"
    root.mkdir()
    (root / "classInd.txt").write_text("1 Walking\n")
    os.symlink(elsewhere, root / "Walking", target_is_directory=True)
    params = data_params(tmp_path, root)
    before = dataset_files(params)
    assert [row["path"] for row in before] == ["Walking/v_Walking_g01_c01.avi", "classInd.txt"]
    (elsewhere / "v_Walking_g01_c01.avi").write_bytes(b"another, longer video")
    assert dataset_files(params) != before


def test_a_link_loop_is_one_line(tmp_path):
    root = tmp_path / "dataset"
    (root / "Walking").mkdir(parents=True)
    os.symlink(root, root / "Walking" / "again", target_is_directory=True)
    with pytest.raises(
        PrivharError, match=r"^data.root: .*again is .*dataset again \(a symbolic link loop\)"
    ):
        dataset_files(data_params(tmp_path, root))


def test_a_name_that_is_not_utf8_and_a_broken_link_are_listed_not_fatal(tmp_path, caplog):
    """Issue 61: one file named in another encoding (Latin-1 é) anywhere under data.root stopped scan, so every
    run, with a traceback; a dangling link stopped it with "No such file or directory". The first is listed with
    its byte escaped, the second as a broken link (size -1, a warning naming it), until it points at a file."""
    from tasks.scan import scan

    root = tmp_path / "dataset"
    (root / "Walking").mkdir(parents=True)
    (root / "Walking" / "v_Walking_g01_c01.avi").write_bytes(b"video")
    (root / os.fsdecode(b"Walking/caf\xe9.avi")).write_bytes(b"latin-1 named")
    os.symlink(root / "gone.avi", root / "Walking" / "dangling.avi")
    path = write_params(tmp_path, {"data": {"source": "ucf101", "root": str(root)}})
    with caplog.at_level("WARNING", logger="tasks.scan"):
        rows = scan(**sections(path, data="data"), out=tmp_path / "files.csv")
    assert [(row["path"], row["size"]) for row in rows] == [
        ("Walking/caf\\xe9.avi", 13),
        ("Walking/dangling.avi", -1),
        ("Walking/v_Walking_g01_c01.avi", 5),
    ]
    assert "Walking/caf\\xe9.avi" in (tmp_path / "files.csv").read_text(encoding="utf-8")
    assert "dangling.avi is a broken symbolic link" in caplog.text
    (root / "gone.avi").write_bytes(b"here now")
    assert dataset_files(data_params(tmp_path, root))[1]["size"] == 8
