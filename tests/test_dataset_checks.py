"""Params the dataset cannot serve are refused at the index, in one line, before any later stage runs (issue 32)."""

from __future__ import annotations

import pytest

from tasks.core.dataset_checks import check_against_dataset
from tasks.core.errors import PrivharError
from tests.conftest import write_params


def rows(people: int = 6, per_person: int = 4, test: int = 2) -> list[dict]:
    """``people`` subjects with ``per_person`` training videos over 3 actions, and ``test`` test videos."""
    train = [
        {
            "video_id": f"v{person}_{index}",
            "split": "train",
            "label": (person + index) % 3,
            "identity": person,
        }
        for person in range(people)
        for index in range(per_person)
    ]
    return train + [
        {"video_id": f"t{index}", "split": "test", "label": index % 3, "identity": 100 + index}
        for index in range(test)
    ]


def test_params_that_fit_pass(tmp_path):
    check_against_dataset(write_params(tmp_path), rows(), "index", 0)


@pytest.mark.parametrize(
    ("overrides", "data", "message"),
    [
        (
            {},
            rows(test=0),
            r"^index: no video in the test split \(check data.split and the split lists\)$",
        ),
        (
            {"private": {"delta": 0.1, "methods": ["dp_sgd"]}},
            rows(),
            r"^private.delta = 0.1 is invalid for dp_sgd: expected δ < 1/N = 0.0417 \(N = 24 training videos in this dataset\)$",
        ),
        (
            {"private": {"delta": 0.1, "methods": ["dp_sgd_person"]}},
            rows(people=12, per_person=1),
            r"^private.delta = 0.1 is invalid for dp_sgd_person: expected δ < 1/N = 0.0833 \(N = 12 training persons",
        ),
        (
            {"federated": {"clients": 8, "partition": "by_identity"}},
            rows(),
            r"^federated.partition = by_identity: client \d of 8 got no training video \(6 people for 8 clients\)",
        ),
        (
            {"federated": {"clients": 3, "partition": "iid", "delta": 0.2}},
            rows(),
            r"^federated.delta = 0.2 is invalid: expected δ < 1/N_k = 0.125 \(with federated.clients = 3, the smallest client holds 8",
        ),
        (
            {
                "ldp": {"video_first_filters": 4},
                "synthesize": {"actions": ["walk", "wave", "squat"]},
            },
            rows(),
            r"^params.yaml: ldp.video_first_filters = 4 and ldp.video_second_filters = 2 must not exceed the 3 actions",
        ),
    ],
)
def test_params_the_dataset_cannot_serve_are_one_line_errors(tmp_path, overrides, data, message):
    with pytest.raises(PrivharError, match=message):
        check_against_dataset(write_params(tmp_path, overrides), data, "index", 0)


def test_one_action_is_a_warning_not_a_refusal(tmp_path, caplog):
    """One action of real footage still runs the protections and their measures (tests/data/vtest)."""
    one = [row for row in rows() if row["label"] == 0 or row["split"] == "test"]
    with caplog.at_level("WARNING"):
        check_against_dataset(write_params(tmp_path), one, "index", 0)
    assert (
        "the train split holds 1 action: the classifiers will have nothing to tell apart"
        in caplog.text
    )
