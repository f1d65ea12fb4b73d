"""Scale-out: a per-video stage sent in shards to a Dask cluster gives the same output as the local run.

The workers run one BLAS / OpenMP thread and the local run as many as the machine has, so these tests are
also the thread-count check: decode and anonymize must give the same bytes, Video-DPRP the same bytes but
for its stated rounding tolerance (``assert_frames_agree``).
"""

import logging
from pathlib import Path

import numpy as np
import pytest
from conftest import assert_frames_agree, write_params

from flows.stage_commands import stage_call
from tasks.core.parallel import installed_mapper
from tasks.core.params import OrchestrateParams
from tasks.core.params_files import load_section

decode = stage_call("decode")


def tree_bytes(folder: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(folder)): path.read_bytes()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def test_decode_on_a_dask_cluster_is_byte_identical_to_the_local_run(
    tiny_synthetic, prefect_api, tmp_path, monkeypatch
):
    from dask.distributed import LocalCluster

    from flows.stage_tasks import shard_mapper

    monkeypatch.chdir(tiny_synthetic)
    params = tiny_synthetic / "params.yaml"
    decode(params_path=params, source=Path("data/synthesize"), out=tmp_path / "local")
    settings = load_section(params, "orchestrate", OrchestrateParams)
    with LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None
    ) as cluster:
        assert cluster.scheduler_address.startswith("tcp://127.0.0.1:")
        on_dask = settings.model_copy(
            update={
                "task_runner": "dask",
                "dask_address": cluster.scheduler_address,
                "shard_size": 5,
            }
        )
        with installed_mapper(
            shard_mapper("decode", on_dask, logging.LoggerAdapter(logging.getLogger("test"), {}))
        ):
            decode(params_path=params, source=Path("data/synthesize"), out=tmp_path / "dask")
        ran_on_cluster = sum(
            sum(prefix.state_counts.values()) for prefix in cluster.scheduler.task_prefixes.values()
        )
        assert (
            ran_on_cluster >= 3
        )  # 12 videos in shards of 5: three tasks went through the scheduler
    local, remote = tree_bytes(tmp_path / "local"), tree_bytes(tmp_path / "dask")
    assert len(local) > 20 and local.keys() == remote.keys()
    assert [name for name in local if local[name] != remote[name]] == []


@pytest.fixture(scope="module")
def dask_settings(tiny_decoded):
    """A LocalCluster of two worker processes, and the orchestrate settings that send shards of 4 videos to it."""
    from dask.distributed import LocalCluster

    settings = load_section(tiny_decoded / "params.yaml", "orchestrate", OrchestrateParams)
    with LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None
    ) as cluster:
        yield settings.model_copy(
            update={
                "task_runner": "dask",
                "dask_address": cluster.scheduler_address,
                "shard_size": 4,
            }
        )


def _on_dask(settings, stage, run):
    from flows.stage_tasks import shard_mapper

    with installed_mapper(
        shard_mapper(stage, settings, logging.LoggerAdapter(logging.getLogger("test"), {}))
    ):
        run()


@pytest.mark.parametrize("projection", ["shared", "per_video"])
def test_dprp_on_a_dask_cluster_agrees_with_the_local_run(
    tiny_decoded, dask_settings, prefect_api, tmp_path, monkeypatch, projection
):
    """Both projection modes: the shared R travels to the workers whole, a per-video R is regenerated there."""
    from flows.stage_commands import stage_call

    dprp = stage_call("dprp")

    monkeypatch.chdir(tiny_decoded)
    params = write_params(
        tmp_path,
        {
            "dprp": {"epsilons": [8.0], "projection": projection},
            "privacy": {"randomness": "seeded"},
        },
    )
    for where in ("local", "dask"):

        def run(where=where):
            dprp(params_path=params, frames=Path("data/decode"), epsilon=8.0, out=tmp_path / where)

        run() if where == "local" else _on_dask(dask_settings, "dprp", run)
    local, remote = tree_bytes(tmp_path / "local"), tree_bytes(tmp_path / "dask")
    assert len(local) > 10 and local.keys() == remote.keys()
    frames = [name for name in local if name.startswith("frames/")]
    assert [name for name in local if name not in frames and local[name] != remote[name]] == []
    for name in frames:
        assert_frames_agree(
            np.load(tmp_path / "local" / name), np.load(tmp_path / "dask" / name), name
        )


@pytest.mark.parametrize("source", ["ground_truth", "motion"])
def test_anonymize_on_a_dask_cluster_is_byte_identical_to_the_local_run(
    tiny_decoded, dask_settings, prefect_api, tmp_path, monkeypatch, source
):
    """The dataset's own masks, and the detector path that needs no extra (background subtraction)."""
    from flows.stage_commands import stage_call

    anonymize = stage_call("anonymize")

    monkeypatch.chdir(tiny_decoded)
    params = write_params(tmp_path, {"anonymize": {"source": source, "min_coverage": 0.0}})
    for where in ("local", "dask"):

        def run(where=where):
            anonymize(
                params_path=params,
                frames=Path("data/decode"),
                method="blackout",
                out=tmp_path / where,
            )

        run() if where == "local" else _on_dask(dask_settings, "anonymize", run)
    local, remote = tree_bytes(tmp_path / "local"), tree_bytes(tmp_path / "dask")
    assert len(local) > 10 and local.keys() == remote.keys()
    assert [name for name in local if local[name] != remote[name]] == []


def test_a_failing_shard_names_its_videos_and_leaves_no_output(
    tiny_decoded, dask_settings, prefect_api, tmp_path, monkeypatch
):
    from flows.stage_commands import stage_call

    dprp = stage_call("dprp")
    from tasks.core.errors import PrivharError

    monkeypatch.chdir(tiny_decoded)
    staged = tmp_path / "frames"
    import shutil

    shutil.copytree(Path("data/decode"), staged)
    broken = sorted((staged / "frames").glob("*.npy"))[5]
    np.save(broken, np.zeros((2, 3), np.float32))  # not a clip
    params = write_params(
        tmp_path, {"dprp": {"epsilons": [8.0]}, "privacy": {"randomness": "seeded"}}
    )
    with pytest.raises(
        PrivharError, match=rf"dprp shard \d+ \(videos .*\) failed at {broken.stem}: "
    ) as error:
        _on_dask(
            dask_settings,
            "dprp",
            lambda: dprp(params_path=params, frames=staged, epsilon=8.0, out=tmp_path / "out"),
        )
    assert "\n" not in str(error.value)
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out.tmp-*"))
