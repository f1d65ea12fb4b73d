"""The protections grid: every copy side by side, raw frames only where report.show_raw allows."""

import io

import pytest
from PIL import Image

from flows.stage_commands import stage_call
from flows.stage_readers import section, show_raw
from tasks.core.errors import PrivharError
from tasks.core.manifest import copies_under
from tasks.preview import preview
from tests.conftest import write_params

anonymize = stage_call("anonymize")


@pytest.fixture(scope="module")
def copies(tiny_decoded, tmp_path_factory):
    folder = tmp_path_factory.mktemp("preview")
    params = write_params(folder, {"anonymize": {"methods": ["avatar", "low_res_16x12"]}})
    for method in ("avatar", "low_res_16x12"):
        anonymize(
            params_path=params,
            frames=tiny_decoded / "data/decode",
            method=method,
            out=folder / "anonymize" / method,
        )
    return folder


def width(png: bytes) -> int:
    return Image.open(io.BytesIO(png)).size[0]


def params_with(folder, overrides):
    folder.mkdir()
    return write_params(folder, overrides)


def test_grid_has_a_column_per_copy_and_mask_and_raw_only_when_allowed(
    copies, tiny_decoded, tmp_path
):
    assert [copy.name for copy in copies_under([copies / "anonymize"])] == [
        "avatar",
        "low_res_16x12",
    ]
    widths = {}
    for show in (True, False):
        png = preview(
            report=section(
                params_with(tmp_path / str(show), {"report": {"show_raw": show}}), "report"
            ),
            show_raw=show,
            frames=tiny_decoded / "data/decode",
            copies=[copies / "anonymize"],
            out=tmp_path / f"out{show}",
        )
        widths[show] = width(png.read_bytes())
    # raw, avatar, avatar's public mask, low_res: four columns; without raw, three
    assert abs(widths[True] / widths[False] - 4 / 3) < 0.1


def test_auto_shows_raw_frames_of_the_synthetic_dataset_only(tmp_path):
    assert show_raw(write_params(tmp_path, {"report": {"show_raw": "auto"}}))
    real = tmp_path / "real"
    real.mkdir()
    assert not show_raw(
        write_params(real, {"report": {"show_raw": "auto"}, "data": {"source": "ucf101"}})
    )


def test_nothing_to_show_is_one_line(tiny_decoded, tmp_path):
    with pytest.raises(PrivharError, match="no protected copy"):
        preview(
            report=section(write_params(tmp_path), "report"),
            show_raw=True,
            frames=tiny_decoded / "data/decode",
            copies=[tmp_path],
            out=tmp_path / "o",
        )
