"""Scale-out: a per-video stage sent in shards to a Dask cluster gives the same bytes as the local run."""

import logging
from pathlib import Path

from tasks.core.params import OrchestrateParams, load_section
from tasks.core.parallel import installed_mapper
from tasks.decode import decode


def tree_bytes(folder: Path) -> dict[str, bytes]:
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


def test_decode_on_a_dask_cluster_is_byte_identical_to_the_local_run(tiny_synthetic, prefect_api, tmp_path, monkeypatch):
    from dask.distributed import LocalCluster

    from flows.stage_tasks import shard_mapper

    monkeypatch.chdir(tiny_synthetic)
    params = tiny_synthetic / "params.yaml"
    decode(params_path=params, source=Path("data/synthesize"), out=tmp_path / "local")
    settings = load_section(params, "orchestrate", OrchestrateParams)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None) as cluster:
        assert cluster.scheduler_address.startswith("tcp://127.0.0.1:")
        on_dask = settings.model_copy(update={"task_runner": "dask", "dask_address": cluster.scheduler_address, "shard_size": 5})
        with installed_mapper(shard_mapper("decode", on_dask, logging.LoggerAdapter(logging.getLogger("test"), {}))):
            decode(params_path=params, source=Path("data/synthesize"), out=tmp_path / "dask")
        ran_on_cluster = sum(sum(prefix.state_counts.values()) for prefix in cluster.scheduler.task_prefixes.values())
        assert ran_on_cluster >= 3  # 12 videos in shards of 5: three tasks went through the scheduler
    local, remote = tree_bytes(tmp_path / "local"), tree_bytes(tmp_path / "dask")
    assert len(local) > 20 and local.keys() == remote.keys()
    assert [name for name in local if local[name] != remote[name]] == []
