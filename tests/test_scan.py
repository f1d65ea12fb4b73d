"""The real dataset's file listing follows symbolic links and refuses a link loop (issue 35)."""

from __future__ import annotations

import os

import pytest

from tasks.core.errors import PrivharError
from tasks.core.params import DataParams, load_section
from tasks.scan import dataset_files
from tests.conftest import write_params


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
