"""Params are checked when a stage starts: one line naming the key, the value and what is allowed."""

from pathlib import Path

import pytest
import yaml

from tasks.core.errors import PrivharError
from tasks.core.params import DecodeParams, SynthesizeParams
from tasks.core.params_files import SECTIONS, load_section
from tests.conftest import write_params


def test_repository_params_are_valid():
    root = Path(__file__).resolve().parents[1] / "params.yaml"
    raw = yaml.safe_load(root.read_text())
    from tasks.core.params_files import SECTIONS, parse_section

    for section in SECTIONS:
        parse_section(raw, section, path=root)


@pytest.mark.parametrize(
    ("section", "overrides", "expected"),
    [
        ("decode", {"decode": {"fps": -3.0}}, "decode.fps = -3.0 is invalid"),
        ("decode", {"decode": {"frames": "16"}}, "decode.frames = '16' is invalid"),
        (
            "decode",
            {"decode": {"short_videos": "mirror"}},
            "decode.short_videos = 'mirror' is invalid: input should be 'loop' or 'pad'",
        ),
        ("decode", {"decode": {"frame_size": [96]}}, "decode.frame_size = [96] is invalid"),
        (
            "decode",
            {"decode": {"max_failed_fraction": 1.5}},
            "decode.max_failed_fraction = 1.5 is invalid",
        ),
        ("decode", {"decode": {"fsp": 8.0}}, "decode.fsp is not a known key of 'decode'"),
        (
            "synthesize",
            {"synthesize": {"actions": ["walk", "moonwalk"]}},
            "synthesize.actions.1 = 'moonwalk' is invalid",
        ),
        (
            "synthesize",
            {"synthesize": {"test_fraction": 1.0}},
            "synthesize.test_fraction = 1.0 is invalid",
        ),
        (
            "private",
            {"private": {"seeds_at_epsilon": {0.5: 0}}},
            "private.seeds_at_epsilon.0.5 = 0 is invalid",
        ),
        # issue 61: finite, as private.epsilons (∞ would be a raw copy under a DP method's name)
        ("dprp", {"dprp": {"epsilons": [2.0, float("inf")]}}, "dprp.epsilons.1 = inf is invalid"),
        # issue 82: a typo in a family or tuning key was accepted and silently ignored
        (
            "report",
            {"report": {"seeds_per_family": {"dprpp": 3}}},
            "'dprpp': 3} is invalid: 'dprpp' names no family the train stage trains: expected one of baseline, public, "
            "dprp, anonymize",
        ),
        (
            "report",
            {"report": {"seed_rule": {"families": ["dprp", "anonymise"]}}},
            "report.seed_rule.families = ['dprp', 'anonymise'] is invalid: 'anonymise' names no family",
        ),
        ("train", {"train": {"epochs_per_family": {"dpr": 8}}}, "'dpr' names no family the train"),
        (
            "federated",
            {"federated": {"seeds_per_tuning": {"selectiv": 40}}},
            "'selectiv': 40} is invalid: 'selectiv' names no row of federated.tunings: expected one of full, "
            "selective",
        ),
        ("federated", {"federated": {"reference_seeds": {"fulll": 3}}}, "'fulll' names no row"),
        # issue 82: a billion canaries passed, and the stages ran out of memory after their work
        (
            "private",
            {"private": {"audit_canaries": 1_000_000_000}},
            "private.audit_canaries = 1000000000 is invalid: input should be less than or equal to 5000",
        ),
        ("federated", {"federated": {"audit_canaries": 5001}}, "less than or equal to 5000"),
        ("dprp", {"dprp": {"audit_frames": 10**9}}, "less than or equal to 100000"),
        ("ldp", {"ldp": {"audit_canaries": 10**9}}, "less than or equal to 1000000"),
        # issue 82: an ε̂ "at 0 % confidence" entered the ledger
        (
            "ldp",
            {"ldp": {"audit_confidence": 0.001}},
            "ldp.audit_confidence = 0.001 is invalid: input should be greater than or equal to 0.5",
        ),
    ],
)
def test_bad_values_name_key_value_and_rule(tmp_path, section, overrides, expected):
    path = write_params(tmp_path, overrides)
    model = SECTIONS[section]
    with pytest.raises(PrivharError) as caught:
        load_section(path, section, model)
    message = str(caught.value)
    assert expected in message
    assert message.startswith(str(path))
    assert "\n" not in message


def test_a_null_per_tuning_entry_drops_it_whether_or_not_the_tuning_is_there(tmp_path):
    """A profile narrows federated.tunings to one row and nulls the other's entries (issue 82, item 8's follow-up)."""
    path = write_params(tmp_path)
    params = yaml.safe_load(path.read_text())
    params["federated"].update(
        tunings={"full": "all"},
        seeds_per_tuning={"full": 3, "selective": None},
        reference_seeds={"selective": None},
        recipe_per_tuning={"selective": None},
    )
    path.write_text(yaml.safe_dump(params))
    federated = load_section(path, "federated", SECTIONS["federated"])
    assert federated.seeds_per_tuning == {"full": 3, "selective": None}


def test_missing_key_and_section(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump({"decode": {"fps": 8.0}}))
    with pytest.raises(PrivharError, match=r"decode\.frames is missing"):
        load_section(path, "decode", DecodeParams)
    with pytest.raises(PrivharError, match="section 'synthesize' is missing"):
        load_section(path, "synthesize", SynthesizeParams)


def test_unreadable_files(tmp_path):
    with pytest.raises(PrivharError, match="params file not found"):
        load_section(tmp_path / "nope.yaml", "decode", DecodeParams)
    broken = tmp_path / "broken.yaml"
    broken.write_text("decode: [unclosed\n")
    with pytest.raises(PrivharError, match="not valid YAML at line"):
        load_section(broken, "decode", DecodeParams)


def test_the_public_schedule_size_is_the_embedded_datasets_published_split():
    """private.public_size (q, the steps and the normaliser of every private method) is a public number: the train
    split's size and the identities as the synthesize params publish them, not a count taken from the private data."""
    from tasks.core.dp_params import PrivateParams
    from tasks.synthesize import plan_videos

    root = Path(__file__).resolve().parents[1] / "params.yaml"
    synthesize = load_section(root, "synthesize", SynthesizeParams)
    public = load_section(root, "private", PrivateParams).public_size
    train = [job for job in plan_videos(0, synthesize) if job.split == "train"]
    assert public == {"video": len(train), "person": synthesize.identities}
