"""``privhar protect IN... -o OUT``: people (or faces) removed from whole videos at their own resolution and rate.

Each video decoded a stretch at a time (a long video never sits in memory whole) through
:class:`tasks.anonymize.frame_protector.FrameProtector` (the finder, the method and the fail-closed gate). A stretch the
gate holds back is released black (``on_fail: blackout``) or the whole video is not written (``skip``).

The output is written beside its final name and renamed into place at the end: nothing half-written. Audio packets
are copied unchanged with ``keep_audio``; container and stream metadata (a camera's serial number, a GPS position)
are dropped unless ``keep_metadata``.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

import av

from tasks.anonymize.frame_protector import (
    FrameProtector,
    ProtectOptions,
    Summary,
    check_options,
)
from tasks.anonymize.video_container import (
    VIDEO_CODECS,
    chunks,
    copy_audio,
    encode_frames,
    frame_rate,
    open_input,
    open_output,
    reason_of,
    start_stream,
)
from tasks.core.errors import PrivharError, printable
from tasks.core.params import AnonymizeParams
from tasks.core.progress import progress
from tasks.core.storage import staging_file

log = logging.getLogger(__name__)


def output_for(source: Path, root: Path | None, target: Path) -> Path:
    """Where ``source`` goes: ``target`` itself when it names a video file, else inside the folder ``target`` (under
    its path relative to ``root`` when it came from a folder)."""
    if target.suffix.lower() in VIDEO_CODECS:
        return target
    relative = source.relative_to(root) if root is not None else Path(source.name)
    suffix = source.suffix.lower() if source.suffix.lower() in VIDEO_CODECS else ".mp4"
    return target / relative.with_suffix(suffix)


def protect_file(
    source: Path,
    target: Path,
    *,
    options: ProtectOptions,
    params: AnonymizeParams,
) -> Summary:
    """Protect the video ``source`` into ``target``; one-line errors name the file, nothing is left half-written."""
    if target.resolve() == source.resolve():
        raise PrivharError(f"{target}: is the input video too; write the protected copy elsewhere")
    summary = Summary(printable(str(source)), printable(str(target)))
    container = open_input(source)
    staging = None
    started = time.perf_counter()
    try:
        staging = staging_file(target)
        summary.replaced = target.exists()
        _protect_stream(source, container, staging, options, params, summary)
        os.replace(staging, target)
    except OSError as error:  # named by the output, not the hidden staging file (issue 82)
        raise PrivharError(
            f"{target}: cannot be written ({error.strerror or error}); nothing was written for it"
        ) from None
    except av.FFmpegError as error:
        raise PrivharError(
            f"{source}: {reason_of(error)} after {summary.frames} frames; nothing was written for it"
        ) from None
    finally:
        container.close()
        if staging is not None:
            staging.unlink(missing_ok=True)
    summary.seconds = time.perf_counter() - started
    return summary


def _protect_stream(
    source: Path,
    container: Any,
    staging: Path,
    options: ProtectOptions,
    params: AnonymizeParams,
    summary: Summary,
) -> None:
    """Every stretch of ``container``'s video protected and encoded into ``staging`` (audio copied when kept)."""
    stream = container.streams.video[0]
    stream.thread_type = "AUTO"
    fps = frame_rate(stream)
    summary.announced = int(stream.frames or 0)
    output, video, audio = open_output(
        staging,
        container,
        fps,
        keep_audio=options.keep_audio,
        keep_metadata=options.keep_metadata,
    )
    protector = FrameProtector(
        fps, params=params, options=options, name=str(source), summary=summary
    )
    size = protector.start(stream.height, stream.width)
    bar = progress(summary.announced or 1, f"protect {printable(source.name)}", unit="frame")
    with output:
        for frames, stamps, rotation in chunks(container, size):
            if summary.frames == 0:
                summary.height, summary.width = start_stream(video, frames, rotation)
            frames = frames[:, : video.height, : video.width]
            first = summary.frames
            released = protector.protect(frames)
            encode_frames(video, output, released.frames, stamps, first)
            bar.update(len(frames))
            del frames, released  # before the next stretch is read: a 4K stretch is gigabytes
        if summary.frames == 0:
            raise PrivharError(f"{source}: no decodable video frames")
        for packet in video.encode():
            output.mux(packet)
        if audio:
            copy_audio(source, output, audio)
    bar.close()


VIDEO_FILES = (".avi", ".mp4", ".mkv", ".mov", ".webm", ".mpg", ".mpeg", ".m4v", ".wmv", ".flv")


def _is_input(path: Path, folder: Path, target: Path) -> bool:
    """Whether a file found in ``folder`` is a video to protect: not hidden (a writer's staging file, a killed one's
    left-over), and not inside the output folder ``target`` (issue 82: an output folder inside the input folder had
    each rerun protect the earlier outputs again, one level deeper)."""
    inside = path.relative_to(folder).parts
    if path.suffix.lower() not in VIDEO_FILES or any(part.startswith(".") for part in inside):
        return False
    return target.resolve() not in path.resolve().parents and path.is_file()


def pairs_of(sources: tuple[Path, ...], target: Path) -> list[tuple[Path, Path]]:
    """(input video, output path) of every video the command was given: files as named, folders searched for files
    with a video suffix; one line for a folder without any, or a file output given several videos."""
    if target.suffix and target.suffix.lower() not in VIDEO_CODECS and not target.is_dir():
        raise PrivharError(
            f"-o {target}: cannot write a video as {target.suffix!r} (expected a folder or a file ending in "
            f"{', '.join(VIDEO_CODECS)})"
        )
    pairs = []
    for source in sources:
        if source.is_dir():
            files = sorted(path for path in source.rglob("*") if _is_input(path, source, target))
            if not files:
                raise PrivharError(f"{source}: holds no video file ({', '.join(VIDEO_FILES)})")
            pairs += [(path, output_for(path, source, target)) for path in files]
        else:
            pairs.append((source, output_for(source, None, target)))
    if target.suffix.lower() in VIDEO_CODECS and len(pairs) > 1:
        raise PrivharError(
            f"-o {target}: names one video file, but {len(pairs)} videos are given; name a folder"
        )
    outputs = [output for _, output in pairs]
    if len(set(outputs)) < len(outputs):
        twice = next(output for output in outputs if outputs.count(output) > 1)
        raise PrivharError(f"-o {target}: two inputs would both be written to {twice}")
    return pairs


def _protect_one(
    pair: tuple[Path, Path], *, options: ProtectOptions, params: AnonymizeParams
) -> Summary | str:
    """One video's summary, or the one line that says why it was not protected."""
    try:
        return protect_file(pair[0], pair[1], options=options, params=params)
    except PrivharError as error:
        return printable(str(error))


def protect_videos(
    sources: tuple[Path, ...],
    target: Path,
    *,
    params: AnonymizeParams,
    workers: int,
    **options: Any,
) -> list[Summary | str]:
    """Protect every video of ``sources`` into ``target`` on ``workers`` processes;
    return each video's summary, or the line that says why it was not protected."""
    from functools import partial

    from tasks.core.parallel import map_on_processes, worker_count

    chosen = ProtectOptions.of(options)
    # the paths first: a bad one is refused before the finders are imported
    pairs = pairs_of(sources, target)
    check_options(chosen)
    results = map_on_processes(
        partial(_protect_one, options=chosen, params=params),
        pairs,
        workers=min(worker_count(workers), len(pairs)),
        desc="protect",
    )
    return results


def total_line(results: list[Summary | str], method: str) -> str:
    """The command's last line: videos written, frames, the rate a worker kept, stretches released black by the gate
    and frames written black for any reason."""
    done = [result for result in results if isinstance(result, Summary)]
    frames, seconds = sum(s.frames for s in done), sum(s.seconds for s in done)
    return (
        f"protect: {len(done)} of {len(results)} videos written with {method}, {frames} frames, "
        f"{frames / max(seconds, 1e-9):.1f} frames/s a worker; "
        f"{sum(len(s.held_back) for s in done)} stretches released black by the gate, "
        f"{sum(s.black_frames for s in done)} frames written black in all"
    )
