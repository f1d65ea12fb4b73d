"""Params the dataset cannot satisfy, refused at the index: seconds into a run, not after the minutes of work that
come before the stage that would refuse them (issue 32: ``ldp`` refused 5 classes after 4 minutes).

Each check repeats a condition a later stage applies to the same rows (the stage keeps its own: it may run alone):

- both splits hold videos (every training and scoring stage); one action only is said in a warning;
- ``train-private``: ``private.delta`` < 1/N for each method's DP unit (N training videos or people:
  :func:`tasks.video_data.subjects.privacy_units`, as the stage counts them);
- ``train-federated``: ``federated.partition`` gives every client a video (:func:`tasks.video_data.partition.partition`,
  the stage's own dealing) and ``federated.delta`` < 1/N_k of the smallest client;
- ``ldp``: at most as many DCA filters as the public set has actions (its filters are fitted on them);
- ``decode`` / ``train``: every action of the test split is one the train split teaches (a warning); the clip that
  ``decode.frames`` at ``decode.fps`` asks for fits in at least one video (the others are looped or padded: a warning
  with their count), and ``train.input_size`` is no larger than ``decode.frame_size`` (a warning where videos are
  smaller than ``decode.frame_size`` and so upsampled). Sizes come from the container headers the index read;
- memory (issue 35: ``ldp.video_crop: [4096, 4096]`` was OOM-killed, ``decode.frames: 1e8`` a MemoryError): the
  largest array each stage holds, from the params and the dataset's counts, against this machine's memory.

The index stage (synthesize) logs each problem as a warning — ``dvc repro anonymize@avatar`` needs no federated
client — and ``privhar flow`` refuses the whole run in one line once the index is built, before any
other stage (flows/preflight.py). The index does not depend on these params in dvc.yaml: a changed param reruns the
stage that uses it, and the runner checks again.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from tasks.core.dp_params import FederatedParams, LdpParams, PrivateParams
from tasks.core.errors import PrivharError
from tasks.core.guarantee import check_delta
from tasks.core.item_randomness import derive_seed
from tasks.core.params import DecodeParams, TrainParams
from tasks.core.params_files import DatasetSections
from tasks.core.private_catalogue import CATALOGUE
from tasks.video_data.partition import partition
from tasks.video_data.subjects import privacy_units

LOG = logging.getLogger(__name__)


def _valid(section: Any) -> Any:
    """A section as loaded; a section that did not load raises its own one-line error (one problem)."""
    if isinstance(section, PrivharError):
        raise section
    return section


def dataset_problems(
    sections: DatasetSections, rows: list[dict[str, Any]], where: str, base_seed: int
) -> list[str]:
    """One line for each param ``rows`` (the index, ``where``) cannot serve; empty when they all fit."""
    problems = [
        f"{where}: no video in the {split} split (check data.split and the split lists)"
        for split in ("train", "test")
        if not any(row["split"] == split for row in rows)
    ]
    train = [row for row in rows if row["split"] == "train"]
    actions = {int(row["label"]) for row in train}
    # protections and their measures still run (one action of real footage, as tests/data/vtest)
    if len(actions) < 2:
        LOG.warning(
            "%s: the train split holds %d action: the classifiers will have nothing to tell apart",
            where,
            len(actions),
        )
    checks = [
        lambda: _check_classes(train, rows, where),
        lambda: _check_sizes(sections, rows, where),
        lambda: _check_private(_valid(sections.private), train),
        lambda: _check_federated(_valid(sections.federated), train, base_seed),
        lambda: _check_ldp(_valid(sections.ldp), len(_valid(sections.synthesize).actions)),
    ]
    for check in checks if train else []:
        try:
            check()
        except PrivharError as problem:
            problems.append(str(problem))
    return problems


def check_against_dataset(
    sections: DatasetSections, rows: list[dict[str, Any]], where: str, base_seed: int
) -> None:
    """Refuse in one line (the first problem, and how many more) when the params cannot serve ``rows``."""
    problems = dataset_problems(sections, rows, where, base_seed)
    if problems:
        more = (
            f" (and {len(problems) - 1} more: {'; '.join(problems[1:])})"
            if len(problems) > 1
            else ""
        )
        raise PrivharError(problems[0] + more)
    LOG.info("%s: the params fit the dataset (%d videos)", where, len(rows))


def _check_private(params: PrivateParams, train: list[dict[str, Any]]) -> None:
    for method in params.methods:
        unit = CATALOGUE[method].unit_under(params.unit)
        count = privacy_units(train, unit)[1]
        counted = f"N = {count} training {unit}s in this dataset"
        check_delta("private.delta", params.delta, count, "N", counted, context=f" for {method}")


def _check_federated(params: FederatedParams, train: list[dict[str, Any]], base_seed: int) -> None:
    shards = partition(
        train,
        params.clients,
        params.partition,
        params.alpha,
        derive_seed(base_seed, "federated", "partition"),
    )
    smallest = min(len(shard) for shard in shards)
    counted = (
        f"with federated.clients = {params.clients}, the smallest client holds {smallest} videos"
    )
    check_delta("federated.delta", params.delta, smallest, "N_k", counted)


def _check_ldp(params: LdpParams, public_actions: int) -> None:
    if max(params.video_first_filters, params.video_second_filters) > public_actions:
        raise PrivharError(
            f"params.yaml: ldp.video_first_filters = {params.video_first_filters} and ldp.video_second_filters = "
            f"{params.video_second_filters} must not exceed the {public_actions} actions of the public set "
            "(synthesize.actions) their DCA filters are fitted on (L_r ≤ K)"
        )


def _check_classes(train: list[dict[str, Any]], rows: list[dict[str, Any]], where: str) -> None:
    taught = {row["label"] for row in train}
    untaught = sorted(
        {str(row.get("action", row["label"])) for row in rows if row["label"] not in taught}
    )
    # a warning: the run still measures the protections; each such test video scores as an error
    if untaught:
        LOG.warning(
            "%s: the test split holds actions the train split has no video of: %s (no classifier can learn them; "
            "check data.split and the split lists)",
            where,
            ", ".join(untaught),
        )


def _check_sizes(sections: DatasetSections, rows: list[dict[str, Any]], where: str) -> None:
    """The clip shape and memory checks, when the sections they read are valid: an invalid one is the error of the
    stage that reads it (its own one line, from its task), not a problem of the dataset."""
    decode, train, ldp = sections.decode, sections.train, sections.ldp
    if any(isinstance(section, PrivharError) for section in (decode, train, ldp)):
        return
    _check_clip_shape(decode, train, rows, where)
    _check_memory(decode, train, ldp, rows, where)


def _check_clip_shape(
    decode: DecodeParams, train: TrainParams, rows: list[dict[str, Any]], where: str
) -> None:
    if any(wanted > kept for wanted, kept in zip(train.input_size, decode.frame_size)):
        raise PrivharError(
            f"params.yaml: train.input_size = {list(train.input_size)} must not exceed decode.frame_size = "
            f"{list(decode.frame_size)} (height, width): the models would see upsampled frames"
        )
    timed = [row for row in rows if row.get("n_frames") and row.get("fps")]
    seconds = decode.frames / decode.fps
    lengths = [row["n_frames"] / row["fps"] for row in timed]
    if timed and max(lengths) < seconds:
        raise PrivharError(
            f"params.yaml: decode.frames = {decode.frames} at decode.fps = {decode.fps} asks for {seconds:.3g} s a "
            f"clip, longer than every video of {where} (the longest: {max(lengths):.3g} s); lower decode.frames or "
            "raise decode.fps"
        )
    short = sum(length < seconds for length in lengths)
    if short:
        LOG.warning(
            "%s: %d of %d videos are shorter than the %.3g s clip decode.frames / decode.fps asks for: "
            "decode.short_videos = %s fills them",
            where,
            short,
            len(timed),
            seconds,
            decode.short_videos,
        )
    small = sum(
        int(row.get("height") or 0) < decode.frame_size[0]
        or int(row.get("width") or 0) < decode.frame_size[1]
        for row in rows
        if row.get("height")
    )
    if small:
        LOG.warning(
            "%s: %d videos are smaller than decode.frame_size = %s: decode upsamples them",
            where,
            small,
            list(decode.frame_size),
        )


def machine_memory() -> int:
    """Bytes of physical memory on this machine."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def largest_arrays(
    decode: DecodeParams, train: TrainParams, ldp: LdpParams, rows: list[dict[str, Any]]
) -> dict[str, int]:
    """Bytes of the largest array each stage holds at once, by the params that size it (a lower bound of its peak)."""
    frames, (height, width) = decode.frames, decode.frame_size
    most = max(sum(row["split"] == split for row in rows) for split in ("train", "test"))
    crop_height, crop_width = ldp.video_crop
    return {
        "decode.frames × decode.frame_size (one video's decoded frames, uint8 RGB)": frames
        * height
        * width
        * 3,
        "decode.frames × train.input_size over a split's videos (the clips train and evaluate load, uint8 RGB)": most
        * frames
        * train.input_size[0]
        * train.input_size[1]
        * 3,
        "ldp.video_crop × ldp.video_first_filters over a split's videos (DCAConv's first maps, float64)": most
        * ldp.video_first_filters
        * crop_height
        * crop_width
        * 8,
    }


def _check_memory(
    decode: DecodeParams,
    train: TrainParams,
    ldp: LdpParams,
    rows: list[dict[str, Any]],
    where: str,
) -> None:
    memory = machine_memory()
    for what, size in largest_arrays(decode, train, ldp, rows).items():
        if size > memory:
            raise PrivharError(
                f"params.yaml: {what} needs {size / 2**30:,.1f} GiB for {where}, more than this machine's "
                f"{memory / 2**30:,.1f} GiB; lower it"
            )
