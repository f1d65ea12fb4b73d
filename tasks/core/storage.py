"""Atomic stage outputs and lossless frame storage.

A stage writes into a hidden sibling folder and renames it into place only when it has
finished, so a killed or failed stage never leaves a half-written output behind.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from tasks.core.errors import PrivharError

PSEUDO_FILESYSTEMS = (Path("/proc"), Path("/sys"), Path("/dev"))
VIDEO_SUFFIXES = (
    ".npy",
    ".avi",
    ".mp4",
    ".mkv",
    ".mov",
)  # .npy: exact frames; the rest: MPEG-4 through PyAV


def check_writable(path: Path, what: str = "output") -> None:
    """Refuse (one line, before any work) an output that cannot be written: under /proc, /sys or /dev, in a
    read-only folder, below a file, or a folder where a file is wanted."""
    path = Path(path).absolute()
    if any(path == root or root in path.parents for root in PSEUDO_FILESYSTEMS):
        raise PrivharError(
            f"{path}: the {what} cannot go under {next(r for r in PSEUDO_FILESYSTEMS if r == path or r in path.parents)}"
            " (a kernel pseudo-file system)"
        )
    existing = path
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir() and existing != path:
        raise PrivharError(
            f"{path}: the {what} cannot be created: {existing} is a file, not a folder"
        )
    folder = existing if existing.is_dir() else existing.parent
    if not os.access(folder, os.W_OK | os.X_OK):
        raise PrivharError(
            f"{path}: the {what} cannot be written: {folder} is read-only for this user"
        )


def check_video_output(path: Path) -> Path:
    """An output video must be a format this project writes (checked before the work, not after it)."""
    if Path(path).suffix.lower() not in VIDEO_SUFFIXES:
        raise PrivharError(
            f"{path}: cannot write a video as {Path(path).suffix or 'a file without extension'!r} "
            f"(expected one of {', '.join(VIDEO_SUFFIXES)})"
        )
    if Path(path).is_dir():
        raise PrivharError(f"{path}: is a folder; expected a video file name")
    check_writable(path, "video")
    return Path(path)


def write_failed(error: OSError, target: Path) -> OSError | PrivharError:
    """An error while writing ``target`` (a full disk, a quota) as one line naming it; an error that names its own
    file already is kept (issue 35: "No space left on device" named no path)."""
    if error.filename:
        return error
    reason = error.strerror or f"{error}: is the disk full?"  # numpy's short write carries no errno
    return PrivharError(f"{target}: cannot be written ({reason}); nothing was written")


def _staging_name(target: Path, kind: str) -> Path:
    """``.NAME.tmp-PID-RANDOM``: the writer's process id in the name, so another writer can tell its work from
    what a killed one left."""
    return target.parent / f".{target.name}.{kind}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def _writer(staged: Path) -> int | None:
    """The process id a staging name holds; None for a name without one (written before 2026-11-29)."""
    parts = staged.name.rsplit("-", 2)
    return int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else None


def _still_writing(pid: int, staged: Path) -> bool:
    """Whether process ``pid`` lives and is the one that made ``staged``: it started before the name's last change
    (a pid the system gave to a later process is not the writer)."""
    import psutil

    try:
        return psutil.Process(pid).create_time() <= staged.lstat().st_mtime + 1.0
    except psutil.AccessDenied:  # another user's process
        return True
    except (psutil.Error, FileNotFoundError):  # gone, or the name already removed
        return False


def _clear_stale(target: Path, patterns: tuple[str, ...]) -> None:
    """Remove what writers killed mid-way (SIGKILL, power) left beside ``target``; refuse in one line, naming it,
    while another process still writes it (issue 61: two stages writing one output at once broke the first with
    "No such file or directory", its staging folder removed under it as stale)."""
    for pattern in patterns:
        for stale in target.parent.glob(pattern):
            pid = _writer(stale)
            if pid is not None and pid != os.getpid() and _still_writing(pid, stale):
                raise PrivharError(
                    f"{target}: process {pid} is writing it now (another privhar stage or dvc repro?); "
                    "wait for it to end, or stop it, then run again"
                )
            if stale.is_dir():
                shutil.rmtree(stale, ignore_errors=True)
            else:
                stale.unlink(missing_ok=True)


def staging_file(target: Path) -> Path:
    """A new, empty file beside ``target`` for a writer that needs a path of its own (PyAV): ``.NAME.tmp-PID-RANDOM``
    plus ``target``'s suffix (the container format), created exclusively, so a link planted at the name is never
    followed (issue 82: a link at protect's fixed staging name had it overwrite a file outside the output folder);
    refused in one line while another live process writes ``target``, and a killed writer's left-over removed. The
    caller moves it onto ``target`` when done and removes it when not."""
    target.parent.mkdir(parents=True, exist_ok=True)
    _clear_stale(target, (f".{target.name}.tmp-*",))
    staging = _staging_name(target, "tmp")
    staging = staging.with_name(staging.name + target.suffix)
    os.close(os.open(staging, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o644))
    return staging


@contextlib.contextmanager
def atomic_directory(target: Path) -> Iterator[Path]:
    """Yield an empty temporary folder that replaces ``target`` when the block succeeds."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    _clear_stale(target, (f".{target.name}.tmp-*", f".{target.name}.old-*"))
    staging = _staging_name(target, "tmp")
    staging.mkdir()
    try:
        yield staging
    except OSError as error:
        shutil.rmtree(staging, ignore_errors=True)
        raise write_failed(error, target) from None
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    trash = _staging_name(target, "old")
    if target.exists():
        os.replace(target, trash)
    os.replace(staging, target)
    shutil.rmtree(trash, ignore_errors=True)


def atomic_write_bytes(path: Path, payload: bytes) -> None:
    """Write a file so that readers see either the old or the complete new content."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _clear_stale(path, (f".{path.name}.tmp-*",))
    staging = _staging_name(path, "tmp")
    try:
        staging.write_bytes(payload)
        os.replace(staging, path)
    except OSError as error:
        staging.unlink(missing_ok=True)
        raise write_failed(error, path) from None


def is_clip(frames: np.ndarray) -> bool:
    """Whether ``frames`` has the layout every stage stores: (T, H, W, 3) uint8."""
    return frames.dtype == np.uint8 and frames.ndim == 4 and frames.shape[-1] == 3


def save_frames(path: Path, frames: np.ndarray) -> None:
    """Store a (T, H, W, 3) uint8 clip losslessly (``.npy``: exact bytes, fast to memory-map)."""
    if not is_clip(frames):
        raise ValueError(f"frames must be (T, H, W, 3) uint8, got {frames.shape} {frames.dtype}")
    np.save(path, np.ascontiguousarray(frames), allow_pickle=False)


def save_arrays(path: Path, **arrays: np.ndarray) -> None:
    """``np.savez_compressed`` with fixed zip timestamps, so the same arrays give the same bytes.

    numpy stamps each member with the current time, which would change DVC's hash of every
    rerun (and of a run split over machines) although the content is identical.
    """
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, array in arrays.items():
            member = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            member.compress_type = zipfile.ZIP_DEFLATED
            with archive.open(member, "w", force_zip64=True) as stream:
                np.lib.format.write_array(stream, np.asanyarray(array), allow_pickle=False)


def _check_clip_file(path: Path) -> None:
    """Whether ``path``'s ``.npy`` header promises a clip, and the file holds all of it, without reading the data;
    a one-line error naming the file otherwise."""
    expected = "expected a .npy clip (T, H, W, 3) uint8"
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise PrivharError(f"{path}: file not found") from None
    if size == 0:
        raise PrivharError(f"{path}: empty file; {expected}")
    with open(path, "rb") as stream:
        try:
            version = np.lib.format.read_magic(stream)
            if version == (1, 0):
                shape, _, dtype = np.lib.format.read_array_header_1_0(stream)
            elif version == (2, 0):
                shape, _, dtype = np.lib.format.read_array_header_2_0(stream)
            else:
                raise ValueError(f"format version {version}")
        except (ValueError, EOFError, SyntaxError, OSError) as error:
            raise PrivharError(f"{path}: not a readable .npy file ({error}); {expected}") from None
        start = stream.tell()
    if not (dtype == np.uint8 and len(shape) == 4 and shape[-1] == 3):
        raise PrivharError(f"{path}: holds a {shape} {dtype} array; {expected}")
    data = int(np.prod(shape, dtype=object))
    if size - start != data:
        raise PrivharError(
            f"{path}: truncated or damaged: its header promises {data} bytes of frames {shape}, the file holds "
            f"{size - start} (rerun the stage that wrote it)"
        )


def load_frames(path: Path) -> np.ndarray:
    """Read a clip written by :func:`save_frames`. Its header is checked first (issue 35): a damaged, truncated,
    empty or foreign file is a one-line error naming it, never a traceback or an allocation its header invents."""
    path = Path(path)
    _check_clip_file(path)
    return np.load(path, allow_pickle=False)
