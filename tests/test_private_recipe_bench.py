"""``privhar bench private-recipe`` builds its proxy from the public set alone (issue 85): the proxy public model
learns from one half of the people's training videos, the proxy's private videos are the other half's, then the halves
swap."""

from __future__ import annotations

import polars as pl
import pytest
import torch

from benchmarks.private_recipe import _owners, _split_folder


def test_the_proxy_splits_the_public_people_in_two(tmp_path):
    public = tmp_path / "public"
    (public / "frames").mkdir(parents=True)
    (public / "annotations").mkdir()
    rows = [
        {
            "video_id": f"v{i}",
            "split": "test" if i % 4 == 0 else "train",
            "identity": i % 6,
            "label": i % 3,
            "action": f"a{i % 3}",
            "path": f"frames/v{i}.npy",
            "n_frames": 8,
            "fps": 12.0,
            "height": 24,
            "width": 32,
        }
        for i in range(48)
    ]
    pl.DataFrame(rows).write_parquet(public / "manifest.parquet")
    pl.DataFrame(
        {"video_id": [], "path": [], "reason": []},
        schema=dict.fromkeys(("video_id", "path", "reason"), pl.String),
    ).write_parquet(public / "quarantine.parquet")
    held = _split_folder(public, tmp_path / "split")
    split = pl.read_parquet(tmp_path / "split" / "manifest.parquet")
    trained = split.filter(pl.col("split") == "train")
    assert set(trained["identity"]) == {0, 1, 2} and len(trained) == sum(
        row["split"] == "train" and row["identity"] < 3 for row in rows
    )
    assert {row["identity"] for row in held} == {
        3,
        4,
        5,
    }  # the proxy's private people: never trained on
    assert (tmp_path / "split" / "frames").resolve() == (public / "frames").resolve()
    # the other fold: the halves' roles swapped
    swapped = _split_folder(public, tmp_path / "swapped", half=1)
    split = pl.read_parquet(tmp_path / "swapped" / "manifest.parquet")
    assert set(split.filter(pl.col("split") == "train")["identity"]) == {3, 4, 5}
    assert {row["identity"] for row in swapped} == {0, 1, 2}


def test_pseudo_persons_hold_one_or_two_videos():
    owners = _owners(294, 200, 0)
    counts = torch.bincount(owners)
    assert len(counts) == 200 and int((counts == 2).sum()) == 94 and int((counts == 1).sum()) == 106
    with pytest.raises(ValueError, match="cannot make 200 persons"):
        _owners(450, 200, 0)


def test_a_cell_scores_the_mean_of_both_proxies():
    from benchmarks.private_recipe import _mean_of_folds

    def fold(top1: float) -> dict:
        scores = {"2.0": {"top1": top1, "half_width": 1.0, "sigma": 3.0}}
        cell = {
            "batch_size": 300,
            "epochs": 8,
            "learning_rate": 0.8,
            "public_subspace": "class_means",
        }
        return {"cells": [{**cell, "scores": scores}]}

    (cell,) = _mean_of_folds([fold(80.0), fold(77.0)])
    assert cell["top1"] == {"2.0": 78.5} and cell["public_subspace"] == "class_means"
