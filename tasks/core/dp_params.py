"""The params sections of the DP releases (Video-DPRP, private and federated training, LDP) and of the privacy budget:
their ε, δ, accountants, seeds and audits."""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator

from tasks.core.private_catalogue import PRIVATE_METHODS
from tasks.core.section import FrameSize, PositiveInt, Section, known_keys

# a one-run audit's canaries: its gradient canaries widen the head by one column each and add one input each as wide,
# so the private and federated audits' memory grows with the square of the count (5 000 ran in 8 s a private audit
# run, tasks/private/audit.py); randomized response's and Video-DPRP's grow with the count itself
GRADIENT_CANARIES_MOST = 5_000


AUDIT_FRAMES_MOST = 100_000


RESPONSE_CANARIES_MOST = 1_000_000


# ε̂'s confidence: a lower bound held at under even odds is no bound a reader would call one (issue 82)
AuditConfidence = Annotated[float, Field(ge=0.5, lt=1.0)]


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
    # head-only training in a public subspace of the features: the first k principal directions of the public clips',
    # or the directions of their class means (None: every feature)
    public_subspace: PositiveInt | Literal["class_means"] | None = None
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


def tuned(federated: FederatedParams, tuning: str) -> FederatedParams:
    """``federated`` with the recipe ``tuning`` trains by: ``federated.recipe_per_tuning[tuning]`` over the shared
    local_epochs, batch_size, learning_rate and momentum (the stage, its σ and the budget plan all read it here)."""
    own = federated.recipe_per_tuning.get(tuning)
    return (
        federated if own is None else federated.model_copy(update=own.model_dump(exclude_none=True))
    )


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
