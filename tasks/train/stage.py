"""Stage ``train``: fit the shared video classifier with the method ``train.method`` names.

Methods live in :data:`TRAINING_METHODS`, keyed by the params value; the spine brings the
non-private ``baseline`` (AdamW, cross-entropy, cosine learning-rate decay). Every method
trains the model of :func:`tasks.video_models.models.create_video_classifier`, from scratch or (``--init``,
what the pipeline does) from the public model of the pretrain stage.

The same stage trains on raw clips (``data/decode``) or on a protected copy (``data/dprp/eps8.0``,
``data/anonymize/avatar``: protocols 1 and 2 of paper 000, §4.3). A model's key is its folder's
name under ``data/train`` (``baseline``, ``dprp-eps8.0``, ``anonymize-avatar``); the evaluate stage keys its metrics by it, and the registry
files it under ``privhar-<family>``. Its privacy claim is the tighter of the method's and the
training data's (:func:`tasks.core.guarantee.strongest`).

    <frames> (train split) ─▶ clips at train.input_size ─▶ method ─▶ out/model.pt
                                                               └─▶ report/<key>.json, <key>_history.csv
                                                                   (loss, train and test Top-1 per epoch: a DVC plot)
"""

from __future__ import annotations

import json
import math
import re
from functools import partial
from pathlib import Path
from typing import Annotated, Any

import torch

from tasks.core import stage_options as arg
from tasks.core.dp_params import PrivacyParams
from tasks.core.errors import PrivharError
from tasks.core.guarantee import PrivacyGuarantee, data_audit, data_guarantee, strongest
from tasks.core.manifest import MANIFEST_NAME, read_manifest
from tasks.core.params import BaseParams, ModelParams, ReportParams, TrainParams
from tasks.core.seeds import family_seeds
from tasks.core.storage import atomic_directory, atomic_write_bytes
from tasks.core.tables import csv_bytes
from tasks.core.tracking import stage_run, stage_work
from tasks.privacy.budget import check_unprotected
from tasks.train.methods import METHOD_PRIVACY, TrainingData
from tasks.train.seeds import (
    FirstSeed,
    SeedPlan,
    rule_for,
    train_seed,
    train_seeds,
    trainable_parameters,
)
from tasks.video_models.checkpoints import architecture_config
from tasks.video_models.clips import class_names, labels_of, load_clips, split_rows
from tasks.video_models.device import resolve_device
from tasks.video_models.model_registry import CHECKPOINT_TAG, register_model


def _history_csv(history: list[dict[str, float]]) -> bytes:
    return csv_bytes(
        [
            {
                key: (f"{value:.6f}" if isinstance(value, float) else value)
                for key, value in record.items()
            }
            for record in history
        ]
    )


def classifier_config(
    model_params: ModelParams,
    params: TrainParams,
    rows: list[dict[str, Any]],
    key: str,
    family: str,
    frames: Path,
    init: Path | None,
) -> dict[str, Any]:
    """What a trained model's checkpoint records of it: its network, its classes (from the manifest ``rows``) and
    where it learnt."""
    classes = class_names(rows)
    return {
        "num_classes": len(classes),
        **architecture_config(model_params, params),
        "clip_frames": int(split_rows(rows, "train")[0]["n_frames"]),
        "classes": classes,
        "method": params.method,
        "model": key,
        "family": family,
        "frames": str(frames),
        "init": str(init) if init else None,
    }


def paper_number(rows: list[dict[str, Any]]) -> dict[str, float]:
    """The ε a paper prints for the data's noise where it is not the one that holds (Video-DPRP's paper calibration)."""
    printed = rows[0].get("paper_epsilon")
    return {} if printed is None else {"paper_epsilon": float(printed)}


@stage_work
def train(
    *,
    base: BaseParams,
    model_params: ModelParams,
    params: TrainParams,
    seeds_from: ReportParams,
    privacy: PrivacyParams,
    frames: Annotated[
        Path, arg.folder("Folder of the clips to learn from: decoded (raw) or protected.")
    ],
    out: Annotated[
        Path,
        arg.folder(
            "Where to write the trained model; its folder name is the model's key (data/train/<key>).",
            "output",
        ),
    ],
    report: Annotated[
        Path,
        arg.folder(
            "Where to write the training metrics and history (<key>.json, <key>_history.csv).",
            "output",
        ),
    ],
    family: Annotated[
        str | None, arg.value("Registered model privhar-<family> [default: train.method].")
    ] = None,
    as_loaded: bool = False,
    init: Annotated[
        Path | None,
        arg.folder(
            "Folder of a model to fine-tune (the pretrain stage's data/pretrain/public) [default: from scratch].",
            "input",
        ),
    ] = None,
    seeds: Annotated[
        int,
        arg.value(
            "Training seeds (the pipeline passes report.seeds): seed i >= 1 is saved in <out>/seed<i>.",
            minimum=1,
        ),
    ] = 1,
    score_on: Annotated[
        Path | None,
        arg.folder(
            "Raw clips whose test split scores the pilot seeds (protocol 1) when report.seed_rule names the family.",
            "input",
        ),
    ] = None,
) -> dict[str, Any]:
    """Run the stage; return the final training record (of seed 0, the registered model).

    ``params``: the train section as :func:`tasks.core.params_files.load_train` gives it, with ``--epochs`` in place (the
    pretrain stage passes ``public.epochs``); ``as_loaded`` (``--epochs 0``): the model.weights checkpoint kept as it
    is. ``family`` names the registered model (default: the method); ``init`` is a model folder to
    fine-tune from (the public model: how HAR models are trained, from pretrained weights);
    ``seeds`` training seeds (``report.seeds``; ``report.seeds_per_family[family]`` replaces it): seed i ≥ 1 in
    ``out/seed<i>`` (:mod:`tasks.core.seeds`); by ``report.seed_rule`` (``score_on`` given), as many of them as the
    pilot's spread needs (:class:`SeedPlan`).
    """
    key = out.name
    family = _checked_family(family or params.method, seeds, as_loaded, model_params, init)
    seeds = family_seeds(seeds_from, family, seeds)
    rows = read_manifest(frames / MANIFEST_NAME)
    train_rows = split_rows(rows, "train")
    if not train_rows:
        raise PrivharError(f"{frames / MANIFEST_NAME}: no videos in the train split")
    device = _torch_for(base, params)
    privacy, copy_guarantee = _claims(
        train_rows, params, privacy, family, f"{key} (trained on {frames})"
    )
    config = classifier_config(model_params, params, rows, key, family, frames, init)
    run_name = "train" if key == params.method else f"train@{key}"
    with stage_run(run_name, {"base": base, "train": params, "model": model_params}) as run:
        with atomic_directory(out) as staging:
            data = _training_data(rows, frames, params, config["classes"], device)
            plan = SeedPlan(seeds, rule_for(seeds_from, family, score_on, seeds), score_on, params)
            train_one = partial(
                train_seed,
                params=params,
                base_seed=base.seed,
                data=data,
                init=init,
                config=config,
                key=key,
                frames=frames,
                weights=model_params.weights,
                as_loaded=as_loaded,
            )
            first = train_seeds(train_one, plan, run, staging, config, data, privacy)
            final = {**_record(first, train_rows, privacy), **plan.record()}
            run.set_tags(_run_tags(params.method, key, device, privacy, plan.planned))
            data_digest = run.log_dataset(frames, "train", "training")
        atomic_write_bytes(
            report / f"{key}.json", (json.dumps(final, indent=2, sort_keys=True) + "\n").encode()
        )
        atomic_write_bytes(report / f"{key}_history.csv", _history_csv(first.history))
        # registered once the output folder and reports are complete: a failed stage leaves no version behind
        tags = {
            "method": params.method,
            **privacy.as_tags(),
            # the copy's ε̂ where its ε is the one claimed (a DP method's own is its stage's)
            **(data_audit(train_rows) if privacy == copy_guarantee else {}),
            "dataset": f"{frames}@{data_digest}",
            CHECKPOINT_TAG: first.digest,
        }
        register_model(first.model, family=family, key=key, run=run, config=config, tags=tags)
    return final


def _torch_for(base: BaseParams, params: TrainParams) -> torch.device:
    """The device a training runs on, with ``train.threads`` and deterministic kernels on the CPU (CUDA's fast
    kernels, cuDNN benchmark, are not deterministic)."""
    if params.threads:
        torch.set_num_threads(params.threads)
    device = resolve_device(base.device)
    torch.use_deterministic_algorithms(device.type == "cpu")
    return device


def _run_tags(
    method: str, key: str, device: torch.device, privacy: PrivacyGuarantee, seeds: int
) -> dict[str, str | int]:
    return {
        "privhar.method": method,
        "privhar.model": key,
        "privhar.accountant": privacy.accountant,
        "privhar.seeds": seeds,
        "privhar.device": str(device),
    }


def _claims(
    train_rows: list[dict[str, Any]],
    params: TrainParams,
    privacy: PrivacyParams,
    family: str,
    model: str,
) -> tuple[PrivacyGuarantee, PrivacyGuarantee]:
    """The guarantee the model claims (the method's or its copy's, the stronger), and its copy's. A model of a
    non-private copy needs the budget's consent; the public set holds no subject."""
    copy_guarantee = data_guarantee(train_rows)
    if family != "public" and not math.isfinite(copy_guarantee.epsilon):
        check_unprotected(privacy, f"the non-private model {model}")
    return strongest(METHOD_PRIVACY[params.method], copy_guarantee), copy_guarantee


def _checked_family(
    family: str, seeds: int, as_loaded: bool, model_params: ModelParams, init: Path | None
) -> str:
    """``family`` once the train command's options are known to fit together."""
    if seeds < 1:
        raise PrivharError(f"train: --seeds = {seeds} is invalid: expected an integer >= 1")
    if as_loaded and (model_params.weights is None or init is not None):
        raise PrivharError(
            "train: --epochs = 0 keeps the model.weights checkpoint as it is; "
            + ("model.weights is not set" if init is None else "it cannot fine-tune --init")
        )
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", family):
        raise PrivharError(
            f"train: --family = {family!r} is invalid: expected letters, digits, '_', '.' or '-'"
        )
    return family


def _training_data(
    rows: list[dict[str, Any]],
    frames: Path,
    params: TrainParams,
    classes: list[str],
    device: torch.device,
) -> TrainingData:
    """The train split's clips and labels, and the test split's where there is one (seed 0's learning curve)."""
    train_rows, test_rows = split_rows(rows, "train"), split_rows(rows, "test")
    held_out = (
        (load_clips(test_rows, frames, tuple(params.input_size)), labels_of(test_rows))
        if test_rows
        else None
    )
    return TrainingData(
        load_clips(train_rows, frames, tuple(params.input_size)),
        labels_of(train_rows),
        classes,
        device,
        held_out,
    )


def _record(
    first: FirstSeed, train_rows: list[dict[str, Any]], privacy: PrivacyGuarantee
) -> dict[str, Any]:
    """The training record of seed 0: its last epoch, its size and the guarantee its model claims."""
    return {
        **first.history[-1],
        "trainable_parameters": trainable_parameters(first.model),
        "train_videos": len(train_rows),
        "epsilon": privacy.epsilon if math.isfinite(privacy.epsilon) else "inf",
        "delta": privacy.delta,
        "accountant": privacy.accountant,
        "unit": privacy.unit,
        "relation": privacy.relation,
        "randomness": privacy.randomness,
        **paper_number(train_rows),
    }
