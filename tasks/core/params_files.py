"""Reading params.yaml: the file parsed once per text, each section checked against its class (one line naming the key,
the value and what is allowed), and the loaders of the sections a stage reads together."""

from __future__ import annotations

import copy
import dataclasses
import functools
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError
from ruamel.yaml import YAML
from ruamel.yaml.error import MarkedYAMLError, YAMLError

from tasks.core.clip_shapes import zoo_clip
from tasks.core.dp_params import (
    DprpParams,
    FederatedParams,
    LdpParams,
    PrivacyParams,
    PrivateParams,
)
from tasks.core.errors import PrivharError
from tasks.core.params import (
    AnonymizeParams,
    AssessParams,
    BaseParams,
    DataParams,
    DecodeParams,
    EvaluateParams,
    ModelParams,
    OrchestrateParams,
    PublicParams,
    RegistryParams,
    ReportParams,
    SynthesizeParams,
    TrainParams,
)
from tasks.core.section import Section

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
