"""Real datasets in their published layouts, indexed into source-manifest rows.

- UCF101: ``<root>/<Class>/<video>.avi`` with ``trainlist0N.txt`` / ``testlist0N.txt``
  (and optionally ``classInd.txt``) in ``<root>`` or ``<root>/ucfTrainTestlist``.
- HMDB51: ``<root>/<class>/<video>.avi`` with ``<class>_test_splitN.txt`` files
  (``<video> 1`` train, ``2`` test, ``0`` unused) in ``<root>``,
  ``<root>/testTrainMulti_7030_splits`` or ``<root>/splits``.

Rows carry the container's own metadata where it can be read; a file that cannot even be
probed keeps zeros and is left for ``decode`` to quarantine with its reason.

Every row names its data subject (the person is the unit of privacy: docs/privacy.md) in ``identity``,
with ``subject`` saying what it is: UCF101's group (``v_<Class>_g08_c01``: the 25 groups are the same
actors), HMDB51's source video (``<source>_<action>_<6 meta fields>``: one film or clip, the same
people), or a ``data.subjects`` CSV (``video_id,subject``) that overrides both. A video whose subject
cannot be told keeps ``identity`` null: it is its own subject, and the report says how many are.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import av
import numpy as np
import polars as pl

from tasks.core.catalogue import Catalogue
from tasks.core.errors import PrivharError
from tasks.core.tables import read_csv

Indexer = Callable[[Path, int], list[dict[str, Any]]]
DATASETS: Catalogue[Indexer] = Catalogue("dataset")


def open_video(path: Path) -> av.container.InputContainer:
    """PyAV's container of ``path`` for reading. Metadata that is not UTF-8 (a title in Latin-1, as in HMDB51 clips) is
    dropped, not fatal: PyAV's default raises UnicodeDecodeError on opening such a file."""
    return av.open(str(path), metadata_errors="ignore")


def read_frames(path: Path, pixel_format: str = "rgb24") -> list[np.ndarray]:
    """Every frame of ``path``'s first video stream, (H, W, 3) uint8 in ``pixel_format`` (rgb24, bgr24); PyAV's
    errors (FFmpegError, OSError, ValueError, IndexError) are the caller's to turn into its own verdict."""
    with open_video(path) as container:
        return [frame.to_ndarray(format=pixel_format) for frame in container.decode(video=0)]


def probe(path: Path) -> dict[str, Any]:
    """n_frames, fps, height, width from the container header (zeros if unreadable)."""
    try:
        with open_video(path) as container:
            stream = container.streams.video[0]
            fps = float(stream.average_rate or 0.0)
            frames = stream.frames
            if not frames and stream.duration is not None:
                frames = int(round(float(stream.duration * stream.time_base) * fps))
            return {
                "n_frames": int(frames or 0),
                "fps": fps,
                "height": int(stream.height),
                "width": int(stream.width),
            }
    except (av.FFmpegError, IndexError, OSError, ValueError):
        return {"n_frames": 0, "fps": 0.0, "height": 0, "width": 0}


def _find(root: Path, names: list[str], folders: tuple[str, ...]) -> Path | None:
    for folder in folders:
        for name in names:
            candidate = root / folder / name
            if candidate.is_file():
                return candidate
    return None


UCF101_GROUP = re.compile(r"^v_(.+)_g(\d+)_c\d+$")
HMDB51_META_FIELDS = 6  # visible body parts, camera motion, people, viewpoint, quality, clip number


def ucf101_subject(stem: str) -> str | None:
    """UCF101's group of a video within its action (``v_ApplyEyeMakeup_g08_c01`` -> ``ApplyEyeMakeup_g08``).

    UCF101 (Soomro et al. 2012, §2) divides each action's clips into 25 groups whose clips share actors and
    background; group numbers mean nothing across actions (g08 of ApplyEyeMakeup is not g08 of Basketball), so the
    subject — the ledger's person and the federated partition's owner — is the group within its action. Treating g08
    as one person across all 101 actions made 25 "people" of 13 320 clips: person-level DP was hopeless by construction.
    """
    found = UCF101_GROUP.match(stem)
    return f"{found.group(1)}_g{int(found.group(2)):02d}" if found else None


def hmdb51_subject(stem: str, action: str) -> str | None:
    """HMDB51's source video of a clip (``April_09_brush_hair_u_nm_np1_ba_goo_0`` -> ``April_09``)."""
    fields = stem.split("_")
    action_fields = action.split("_")
    head = fields[:-HMDB51_META_FIELDS]
    if len(head) <= len(action_fields) or head[-len(action_fields) :] != action_fields:
        return None
    return "_".join(head[: -len(action_fields)])


def _row(video: Path, split: str, label: int, action: str, subject: str | None) -> dict[str, Any]:
    return {
        "video_id": video.stem,
        "split": split,
        "label": label,
        "action": action,
        "subject": subject,
        "path": str(video.resolve()),
        **probe(video),
    }


def _classes(root: Path) -> list[str]:
    classes = sorted(
        entry.name
        for entry in root.iterdir()
        if entry.is_dir()
        and not entry.name.startswith((".", "ucfTrainTestlist", "testTrainMulti", "splits"))
    )
    if not classes:
        raise PrivharError(
            f"{root}: no class folders found (data.root must hold one folder per action)"
        )
    return classes


class _Listed:
    """Where each video of a split list was named: a video listed twice (in one split or in both), or two videos of
    one file name in two classes (their frames are stored by name: one would overwrite the other), is refused in one
    line naming both places (issue 35)."""

    def __init__(self) -> None:
        self.places: dict[str, tuple[str, Path]] = {}  # video id -> (file:line, the video's path)

    def add(self, video: Path, where: str) -> None:
        first = self.places.get(video.stem)
        if first is None:
            self.places[video.stem] = (where, video)
            return
        if first[1] == video:
            raise PrivharError(
                f"{where}: {video.name} is listed again (first at {first[0]}); expected once"
            )
        raise PrivharError(
            f"{where}: {video} has the file name of {first[1]} (listed at {first[0]}); expected one file name per "
            "video across the classes (frames are stored by name)"
        )


def _listed_path(line: str) -> str:
    """The video of a split-list line ``<path>[ <label>]``: the path may hold spaces, the label is a number."""
    fields = line.strip().rsplit(maxsplit=1)
    return fields[0] if len(fields) == 2 and fields[1].isdigit() else line.strip()


def list_lines(path: Path) -> list[str]:
    """The lines of a class or split list, read as UTF-8 (a byte-order mark allowed); a list in another encoding is
    refused in one line naming the file, line and byte (issue 35: a latin-1 list was a traceback)."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8-sig").splitlines()
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise PrivharError(
            f"{path}:{line}: not UTF-8 text (byte 0x{data[error.start]:02x}); save the list as UTF-8, as the file "
            "names on disk are"
        ) from None


@DATASETS.entry("ucf101")
def index_ucf101(root: Path, split: int) -> list[dict[str, Any]]:
    folders = (".", "ucfTrainTestlist")
    lists = {
        name: _find(root, [f"{name}list{split:02d}.txt"], folders) for name in ("train", "test")
    }
    for name, found in lists.items():
        if found is None:
            raise PrivharError(
                f"{root}: {name}list{split:02d}.txt not found (looked in {root} and {root / 'ucfTrainTestlist'})"
            )
    class_index = _find(root, ["classInd.txt"], folders)
    if class_index is not None:
        classes = [  # "<number> <name>": the name may hold spaces
            line.split(maxsplit=1)[1].strip()
            for line in list_lines(class_index)
            if len(line.split(maxsplit=1)) == 2
        ]
    else:
        classes = _classes(root)
    label_of = {name: index for index, name in enumerate(classes)}
    rows, listed = [], _Listed()
    for split_name, list_file in lists.items():
        for number, line in enumerate(list_lines(list_file), start=1):
            if not line.strip():
                continue
            relative = _listed_path(line)
            action = relative.split("/")[0]
            if action not in label_of:
                raise PrivharError(
                    f"{list_file}:{number}: class '{action}' is not a known class folder"
                )
            video = root / relative
            listed.add(video, f"{list_file}:{number}")
            rows.append(
                _row(video, split_name, label_of[action], action, ucf101_subject(video.stem))
            )
    return rows


@DATASETS.entry("hmdb51")
def index_hmdb51(root: Path, split: int) -> list[dict[str, Any]]:
    classes = _classes(root)
    rows, listed = [], _Listed()
    for label, action in enumerate(classes):
        names = [f"{action}_test_split{split}.txt"]
        split_file = _find(root, names, (".", "testTrainMulti_7030_splits", "splits"))
        if split_file is None:
            raise PrivharError(
                f"{root}: {names[0]} not found (looked in {root}, testTrainMulti_7030_splits/ and splits/)"
            )
        for number, line in enumerate(list_lines(split_file), start=1):
            fields = line.strip().rsplit(maxsplit=1)
            if not fields:
                continue
            if len(fields) != 2 or fields[1] not in ("0", "1", "2"):
                raise PrivharError(
                    f"{split_file}:{number}: expected '<video> <0|1|2>', got {line.strip()!r}"
                )
            if fields[1] == "0":
                continue
            video = root / action / fields[0]
            listed.add(video, f"{split_file}:{number}")
            rows.append(
                _row(
                    video,
                    "train" if fields[1] == "1" else "test",
                    label,
                    action,
                    hmdb51_subject(video.stem, action),
                )
            )
    return rows


def _by_video(
    rows: list[dict[str, Any]], path: Path, table: pl.DataFrame, what: str
) -> list[dict[str, Any]]:
    """``table``'s columns for each row, in row order (a polars left join on ``video_id``); every video must have one
    line, and only one."""
    repeated = (
        table.filter(pl.col("video_id").is_duplicated())["video_id"].unique().sort().to_list()
    )
    if repeated:
        raise PrivharError(
            f"{path}: {len(repeated)} videos listed more than once (first: {repeated[0]})"
        )
    videos = pl.DataFrame(
        {"video_id": [row["video_id"] for row in rows]}, schema={"video_id": pl.String}
    )
    missing = videos.join(table, on="video_id", how="anti")["video_id"].to_list()
    if missing:
        raise PrivharError(
            f"{path}: no {what} for {len(missing)} videos of the split (first: {missing[0]})"
        )
    return (
        videos.join(table, on="video_id", how="left", maintain_order="left")
        .drop("video_id")
        .to_dicts()
    )


def merge_attributes(rows: list[dict[str, Any]], path: Path) -> list[dict[str, Any]]:
    """PA-HMDB-style privacy attributes: a CSV with ``video_id`` (the file's stem) and one column per attribute
    (0/1, or a value such as a skin tone), added to the rows as ``attr_<column>`` for the assess stage's attacker."""
    if not path.is_file():
        raise PrivharError(f"params.yaml: data.attributes = {str(path)!r} is not a file")
    table = read_csv(path)
    if "video_id" not in table.columns or table.width < 2:
        raise PrivharError(f"{path}: expected a header 'video_id,<attribute>,...'")

    def value(text: str) -> bool | str:
        return {"0": False, "1": True}.get(text.strip(), text.strip())

    found = _by_video(rows, path, table, "attributes")
    return [
        {**row, **{f"attr_{key}": value(text) for key, text in mine.items()}}
        for row, mine in zip(rows, found)
    ]


def merge_subjects(rows: list[dict[str, Any]], path: Path) -> list[dict[str, Any]]:
    """A user's ``video_id,subject`` CSV: who is in each video, overriding what the file names say."""
    if not path.is_file():
        raise PrivharError(f"params.yaml: data.subjects = {str(path)!r} is not a file")
    table = read_csv(path)
    if not {"video_id", "subject"} <= set(table.columns):
        raise PrivharError(f"{path}: expected a header 'video_id,subject'")
    table = table.select("video_id", pl.col("subject").str.strip_chars()).filter(
        pl.col("subject") != ""
    )
    return [
        {**row, "subject": mine["subject"]}
        for row, mine in zip(rows, _by_video(rows, path, table, "subject"))
    ]


def number_subjects(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``identity``: the subject as an integer (sorted names), null where the subject is unknown."""
    numbering = {
        name: number
        for number, name in enumerate(sorted({row["subject"] for row in rows if row["subject"]}))
    }
    return [{**row, "identity": numbering.get(row["subject"])} for row in rows]


def index_dataset(
    source: str,
    root: str | None,
    split: int,
    attributes: str | None = None,
    subjects: str | None = None,
    missing_files: str = "refuse",
) -> list[dict[str, Any]]:
    """Rows for a real dataset named by ``data.source``, with its subjects (from the file names, or the ``subjects``
    CSV) and its privacy attributes when ``attributes`` names them. A split list naming files that are not there (a
    wrong ``data.root``, a partial copy) is refused in one line unless ``missing_files`` is ``quarantine``: then decode
    quarantines each with its reason, under ``decode.max_failed_fraction``."""
    if root is None:
        raise PrivharError(f"params.yaml: data.root is required when data.source = {source!r}")
    folder = Path(root)
    if not folder.is_dir():
        raise PrivharError(f"params.yaml: data.root = {root!r} is not a folder")
    rows = DATASETS[source](folder, split)
    if not rows:
        raise PrivharError(f"{folder}: split {split} lists no videos")
    for name in ("train", "test"):
        if not any(row["split"] == name for row in rows):
            raise PrivharError(
                f"{folder}: split {split} lists no {name} videos (a {name} split is needed)"
            )
    absent = [row["path"] for row in rows if not Path(row["path"]).is_file()]
    if absent and missing_files == "refuse":
        raise PrivharError(
            f"{folder}: split {split} lists {len(absent)} of {len(rows)} videos that are not there (first: "
            f"{absent[0]}); check data.root, or set data.missing_files: quarantine to run without them"
        )
    if subjects:
        rows = merge_subjects(rows, Path(subjects))
    rows = number_subjects(rows)
    return merge_attributes(rows, Path(attributes)) if attributes else rows
