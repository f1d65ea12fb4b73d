"""The privacy ledger of a pipeline run: every release of subject data, its mechanism, unit, relation and randomness,
and each person's total (tasks/privacy/budget.py states the rules).

Two views per person, side by side:
- **per unit** (what each release prints): the sum of the releases' ε as claimed per video (or per frame,
  per pixel change). It is *not* a guarantee for a person who appears in many videos;
- **per person**: each release's group ε over the person's videos (exact from the composed mechanism:
  ``<method>_persons.csv`` of the training stages; Gaussian DP for Video-DPRP; videos × ε for LDP codes),
  summed over the releases (sequential composition). Releases without a DP guarantee, and releases whose
  randomness was seeded (reproducible from params), make the person's total unbounded.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from itertools import groupby
from pathlib import Path
from typing import Any

import polars as pl

from tasks.core.dp_randomness import SECURE
from tasks.core.private_catalogue import CATALOGUE
from tasks.core.seeds import seed_suffix
from tasks.core.tables import frame_of, read_csv, read_parquet
from tasks.privacy.accounting import gaussian_person_epsilon
from tasks.privacy.budget import federated_release, subjects_by_split
from tasks.video_data.subjects import person_videos

SUBJECT_COLUMNS = (
    "subject",
    "dp_releases",
    "epsilon_per_unit_sum",
    "epsilon_person",
    "delta_person",
    "releases_without_dp",
    "releases_seeded",
    "total_epsilon_person",
)
PersonEpsilons = dict[int, tuple[float, float]]  # person -> (ε, δ) under one release


@dataclass(frozen=True)
class Release:
    """One thing made from subject data that leaves the pipeline (a protected copy or a trained model)."""

    name: str
    family: str  # the method: dprp, dp_sgd, …, anonymize, non-private models
    mechanism: str
    epsilon: float  # per unit; inf: no DP guarantee
    delta: float
    accountant: str
    calibration: str
    splits: str  # "train" or "train+test"
    note: str = ""
    unit: str = "none"
    relation: str = "none"
    randomness: str = SECURE  # where the DP noise came from; NO_NOISE for a release without any
    epsilon_person_max: float = math.inf
    persons: PersonEpsilons = field(default_factory=dict, compare=False, repr=False)

    @property
    def private(self) -> bool:
        """A finite ε whose randomness is secret."""
        return math.isfinite(self.epsilon) and self.randomness == SECURE


NO_NOISE = "none"  # the randomness of a release without DP noise (anonymized copies, ε = ∞, non-private models)


def _randomness(epsilon: float, entry: dict[str, Any]) -> str:
    """The randomness a stage recorded for a DP release; NO_NOISE where nothing was noised (ε = ∞)."""
    return str(entry.get("randomness") or SECURE) if math.isfinite(epsilon) else NO_NOISE


def _max_person(persons: PersonEpsilons) -> float:
    return max((epsilon for epsilon, _ in persons.values()), default=math.inf)


def dprp_releases(folder: Path) -> list[Release]:
    """One release per DPRP copy (data/dprp/eps<ε>/ledger.parquet), with each person's ε by Gaussian DP over their
    videos' frames (tasks/privacy/dprp_calibration.py, "The person")."""
    releases = []
    for ledger in sorted(folder.glob("*/ledger.parquet")):
        rows = read_parquet(ledger).to_dicts()
        first = rows[0]
        persons = {}
        for person, videos in person_videos(rows).items():
            persons[person] = gaussian_person_epsilon(
                mu_per_frame=float(first["mu_per_frame"]),
                mu_q_per_video=float(first["mu_q_per_video"]),
                delta=float(first["delta"]),
                failure=float(first["failure_probability"]),
                videos=len(videos),
                frames=max(int(rows[index]["n_frames"]) for index in videos),
            )
        printed = first.get("paper_epsilon")
        note = (
            ""
            if printed is None
            else f"the paper's ε = {float(printed):g} (Theorems 3-4 as printed, not a bound for "
            f"this R); "
        ) + (
            f"same noise: ε {float(first['epsilon_one_pixel']):.3g} for one pixel value, "
            f"{float(first['epsilon_whole_frame']):.3g} for a whole frame"
        )
        releases.append(
            Release(
                f"dprp-{ledger.parent.name}",
                "dprp",
                "Video-DPRP (Gaussian on the projection P and covariance Q)",
                float(first["epsilon"]),
                float(first["delta"]),
                str(first["accountant"]),
                str(first["calibration"]),
                "train+test",
                note,
                str(first["unit"]),
                str(first["relation"]),
                _randomness(float(first["epsilon"]), first),
                _max_person(persons),
                persons,
            )
        )
    return releases


def _persons(path: Path) -> dict[str, PersonEpsilons]:
    """model -> person -> (ε, δ) from a training stage's ``*_persons.csv``."""
    found: dict[str, PersonEpsilons] = {}
    for entry in _csv_entries(path):
        found.setdefault(entry["model"], {})[int(entry["subject"])] = (
            float(entry["epsilon_person"]),
            0.0,
        )
    return found


def private_releases(folder: Path, methods: list[str]) -> list[Release]:
    """One release per private model and training seed (reports/private/<method>.csv); the ε = ∞ references are
    releases without DP."""
    releases = []
    for method in methods:
        persons = _persons(folder / f"{method}_persons.csv")
        for entry in _csv_entries(folder / f"{method}.csv"):
            epsilon, delta = float(entry["epsilon"]), float(entry["delta"])
            mine = {
                person: (value, delta)
                for person, (value, _) in persons.get(entry["model"], {}).items()
            }
            releases.append(
                Release(
                    entry["model"],
                    method,
                    CATALOGUE[method].mechanism if method in CATALOGUE else method,
                    epsilon,
                    delta,
                    entry["accountant"],
                    "σ calibrated to the target ε by the accountant"
                    if math.isfinite(epsilon)
                    else "none: no noise (clipping only)",
                    "train",
                    "" if math.isfinite(epsilon) else "reference without noise",
                    entry.get("unit", "video"),
                    entry.get("relation", "none"),
                    _randomness(epsilon, entry),
                    _max_person(mine),
                    mine,
                )
            )
    return releases


def _csv_entries(path: Path) -> list[dict[str, str]]:
    """The rows of a stage's CSV table; none if the stage has not run (its tables then say "not run")."""
    return read_csv(path, missing_ok=True).to_dicts()


def ldp_releases(path: Path, rows: list[dict[str, Any]] | None = None) -> list[Release]:
    """The randomized DCAConv codes of the ldp stage (reports/ldp/ledger.csv): ε per video = features × ε per feature;
    per person: their training videos × that (pure ε-LDP composes by addition)."""
    train = [row for row in rows or [] if row["split"] == "train"]
    releases = []
    for entry in _csv_entries(path):
        per_video = float(entry["epsilon_per_video"])
        persons = (
            {
                person: (len(videos) * per_video, 0.0)
                for person, videos in person_videos(train).items()
            }
            if math.isfinite(per_video)
            else {}
        )
        releases.append(
            Release(
                entry["release"],
                "ldp",
                entry["mechanism"],
                per_video,
                float(entry["delta"]),
                entry["accountant"],
                f"ε = {float(entry['epsilon_per_feature']):g} per feature × "
                f"{entry['features_per_video']} features",
                entry["splits"],
                "" if math.isfinite(per_video) else "reference without noise",
                entry.get("unit", "video"),
                entry.get("relation", "none"),
                _randomness(per_video, entry),
                _max_person(persons),
                persons,
            )
        )
    return releases


def federated_releases(path: Path) -> list[Release]:
    """One release per federated model (reports/federated/federated.csv): ε per client, the largest over the clients;
    the ε = ∞ references (the same recipe without noise) are releases without DP."""
    persons = _persons(path.with_name("federated_persons.csv"))
    releases = []
    for entry in _csv_entries(path):
        epsilon, delta = float(entry["epsilon"]), float(entry["delta"])
        name = (
            federated_release(entry["aggregation"], entry["tuning"])
            + seed_suffix(int(entry.get("seed") or 0))
            if math.isfinite(epsilon)
            else f"federated-{entry['model']}"
        )
        mine = {
            person: (value, delta) for person, (value, _) in persons.get(entry["model"], {}).items()
        }
        releases.append(
            Release(
                name,
                "federated",
                "FedDP-STECAR: DP-SGD (Opacus) per client on shuffled batches, masked updates, FedAvg / FedNova",
                epsilon,
                delta,
                entry["accountant"],
                "σ calibrated so that a client in every round spends federated.epsilon"
                if math.isfinite(epsilon)
                else "none: no noise (clipping only)",
                "train",
                f"{entry['tuning']} tuning, {entry['aggregation']}"
                + ("" if math.isfinite(epsilon) else ", reference without noise"),
                entry.get("unit", "video"),
                entry.get("relation", "replace-one"),
                _randomness(epsilon, entry),
                _max_person(mine),
                mine,
            )
        )
    return releases


def unprotected_releases(train_reports: Path, anonymize: Path) -> list[Release]:
    """Releases with no DP guarantee: anonymized copies and the models trained on raw clips or on them.

    Models trained on a DPRP copy are post-processing of that copy: free, and not listed.
    """
    releases = [
        Release(
            f"anonymize-{copy.name}",
            "anonymize",
            "obfuscation (no formal guarantee)",
            math.inf,
            0.0,
            "none",
            "none",
            "train+test",
            randomness=NO_NOISE,
        )
        for copy in sorted(anonymize.iterdir())
        if (copy / "manifest.parquet").is_file()
    ]
    for report in sorted(train_reports.glob("*.json")):
        key = report.stem
        if key == "public" or key.startswith("dprp-"):
            continue  # the public model holds no private subject; DPRP models are post-processing
        claim = json.loads(report.read_text())
        epsilon = float(claim.get("epsilon", "inf"))
        if math.isfinite(epsilon):
            continue
        releases.append(
            Release(
                f"model {key}",
                "non-private models",
                "non-private training",
                math.inf,
                0.0,
                str(claim.get("accountant", "none")),
                "none",
                "train",
                randomness=NO_NOISE,
            )
        )
    return releases


def subject_totals(releases: list[Release], rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per person: DP releases holding them, Σ of the per-unit ε (not a guarantee), Σ of their person-level ε and δ
    (sequential composition), releases without DP or with seeded randomness, and the total (∞ if any of those).

    A polars join of who is in which split with what each release covers, grouped by person.
    """
    members, covered, exact = _ledger_frames(releases, rows)
    held = (
        members.join(covered, on="split")
        .unique(["subject", "release"])
        .join(exact, on=["release", "subject"], how="left")
        .with_columns(
            finite=pl.col("epsilon").is_finite(),
            person_epsilon=pl.col("person_epsilon").fill_null(pl.col("epsilon_person_max")),
            person_delta=pl.col("person_delta").fill_null(pl.col("delta")),
        )
        .sort("subject", "release")
    )  # a join's row order varies from run to run, and with it a float sum's last digit
    dp = pl.col("finite")
    totals = (
        held.group_by("subject", maintain_order=True)
        .agg(
            dp.sum().cast(pl.Int64).alias("dp_releases"),
            pl.col("epsilon").filter(dp).sum().round(4).alias("epsilon_per_unit_sum"),
            pl.col("person_epsilon").filter(dp).sum().alias("epsilon_person"),
            pl.col("person_delta").filter(dp).sum().alias("delta_person"),
            (~dp).sum().cast(pl.Int64).alias("releases_without_dp"),
            (dp & ~pl.col("private")).sum().cast(pl.Int64).alias("releases_seeded"),
        )
        .with_columns(
            pl.when(pl.col("epsilon_person").is_finite())
            .then(pl.col("epsilon_person").round(4))
            .otherwise(pl.col("epsilon_person"))
            .alias("epsilon_person")
        )
        .with_columns(
            pl.when((pl.col("releases_without_dp") > 0) | (pl.col("releases_seeded") > 0))
            .then(math.inf)
            .otherwise(pl.col("epsilon_person"))
            .alias("total_epsilon_person")
        )
        .sort("subject")
    )
    return (
        members.select("subject")
        .unique()
        .sort("subject")
        .join(totals, on="subject", how="left")
        .with_columns(
            pl.col("dp_releases", "releases_without_dp", "releases_seeded").fill_null(0),
            pl.col(
                "epsilon_per_unit_sum", "epsilon_person", "delta_person", "total_epsilon_person"
            ).fill_null(0.0),
        )
        .select(SUBJECT_COLUMNS)
        .to_dicts()
    )


def _ledger_frames(
    releases: list[Release], rows: list[dict[str, Any]]
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """Who is in which split; which split each release covers, with its ε, δ and person-level bound; and each
    release's exact person-level (ε, δ) of the people it names."""
    members = pl.DataFrame(
        [
            {"subject": subject, "split": split}
            for split, people in subjects_by_split(rows).items()
            for subject in people
        ],
        schema={"subject": pl.Int64, "split": pl.String},
    )
    covered = pl.DataFrame(
        [
            {
                "release": index,
                "split": split,
                "epsilon": r.epsilon,
                "delta": r.delta,
                "private": r.private,
                "epsilon_person_max": r.epsilon_person_max,
            }
            for index, r in enumerate(releases)
            for split in r.splits.split("+")
        ],
        schema={
            "release": pl.Int64,
            "split": pl.String,
            "epsilon": pl.Float64,
            "delta": pl.Float64,
            "private": pl.Boolean,
            "epsilon_person_max": pl.Float64,
        },
    )
    exact = pl.DataFrame(
        [
            {
                "release": index,
                "subject": subject,
                "person_epsilon": value[0],
                "person_delta": value[1],
            }
            for index, r in enumerate(releases)
            for subject, value in r.persons.items()
        ],
        schema={
            "release": pl.Int64,
            "subject": pl.Int64,
            "person_epsilon": pl.Float64,
            "person_delta": pl.Float64,
        },
    )
    return members, covered, exact


def runs_of(values: list[float]) -> str:
    """Values to 3 significant digits, a run of equal ones once with its count (100 seeds' releases on one line).

    >>> runs_of([0.4991, 0.4992, 0.997, 2.0])
    '0.499 ×2, 0.997, 2'
    >>> runs_of([])
    '—'
    """
    runs = [(text, len(list(group))) for text, group in groupby(f"{value:.3g}" for value in values)]
    return ", ".join(text if count == 1 else f"{text} ×{count}" for text, count in runs) or "—"


def family_summary(releases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ledger per method: its mechanism, unit and relation, its DP releases (ε per unit, the largest ε of one
    person, δ, accountant, calibration) and how many of its releases carry no DP guarantee (a polars group-by)."""
    if not releases:
        return []
    dp = pl.col("epsilon").is_finite()
    first = [
        pl.col(name).filter(dp).first().alias(name)
        for name in ("unit", "relation", "accountant", "calibration", "randomness")
    ]
    grouped = (
        frame_of(releases)
        .group_by("family", maintain_order=True)
        .agg(
            pl.col("mechanism").first(),
            dp.sum().cast(pl.Int64).alias("dp_releases"),
            *first,
            pl.col("epsilon").filter(dp).alias("dp_epsilons"),
            pl.col("epsilon_person_max").filter(dp).alias("person"),
            pl.col("delta").filter(dp).max().fill_null(0.0).alias("delta"),
            pl.col("epsilon").filter(dp).sum().alias("epsilon_sum"),
            (~dp).sum().cast(pl.Int64).alias("releases_without_dp"),
        )
    )
    summary = []
    for row in grouped.to_dicts():
        summary.append(
            {
                "method": row["family"],
                "mechanism": row["mechanism"],
                "dp_releases": row["dp_releases"],
                **{
                    name: row[name] or "none"
                    for name in ("unit", "relation", "calibration", "randomness")
                },
                "epsilons": runs_of(row["dp_epsilons"]),
                "person_epsilons": runs_of(row["person"]),
                "delta": row["delta"],
                "accountant": (row["accountant"] or "none").split(";")[0],
                "epsilon_sum": row["epsilon_sum"],
                "releases_without_dp": row["releases_without_dp"],
            }
        )
    return summary


def method_rows(releases: list[Release]) -> list[dict[str, Any]]:
    return [
        {key: value for key, value in asdict(release).items() if key != "persons"}
        for release in releases
    ]
