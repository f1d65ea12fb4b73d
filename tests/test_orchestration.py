"""The Prefect flow over the DVC DAG, on a real Prefect server: stages as tasks, skips, failures, the run lock.

The whole DAG is the session's one ``privhar flow`` run (tests/conftest.py: pipeline_run), read here from its own
Prefect database; failures, refusals and kills run on ``small_project`` (the stages up to train)."""

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from flows.dag import read_dag
from flows.project_lock import check_unlocked, project_lock
from tasks.core.dp_params import PrivateParams
from tasks.core.errors import PrivharError
from tasks.core.params_files import load_section
from tests.conftest import BIN, REPO, prefect_api_on, sh

STAGES = [
    stage.name for stage in read_dag(REPO)
]  # synthesize, decode, dprp@2.0, ..., train, train-dprp@2.0, ..., evaluate


@pytest.fixture(scope="module")
def shared_api(pipeline_run, prefect_api) -> Path:
    """The Prefect server on the shared run's database, while this module reads it (set up after the session's
    server, so that the two settings blocks end in order)."""
    with prefect_api_on(pipeline_run.project) as url:
        yield url


@pytest.fixture(scope="module")
def project(pipeline_run, shared_api) -> Path:
    """The shared run's project, with its MLflow store (this module's own runs of it only skip or check)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLFLOW_TRACKING_URI", pipeline_run.mlflow_uri)
        yield pipeline_run.project


@pytest.fixture
def small(small_project, prefect_api, mlflow_store, monkeypatch) -> Path:
    """A small project whose runs log to the session's MLflow store, not to the shared run's."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_store)
    return small_project


def run_flow(project: Path, **parameters):
    from flows.pipeline_flow import pipeline_flow

    return pipeline_flow(project=str(project), return_state=True, **parameters)


def task_runs(state, expected: tuple[str, ...] = ()) -> dict[str, str]:
    """Task run name -> state name, for one flow run's final state, read back from the Prefect server."""
    return task_states(state.state_details.flow_run_id, expected)


def task_states(
    flow_run_id, expected: tuple[str, ...] = (), settle_s: float = 60.0
) -> dict[str, str]:
    """Task run name -> state name, for the flow run ``flow_run_id``, once it names every ``expected`` task and two
    reads a second apart agree: the server records task runs from events, behind the flow (under load, a failed task
    was missing right after its flow ended)."""
    from prefect import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    deadline, last = time.monotonic() + settle_s, None
    with get_client(sync_client=True) as client:
        while True:
            runs = client.read_task_runs(
                flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id]))
            )
            states = {run.name: run.state.name for run in runs}
            settled = states == last and set(expected) <= set(states)
            if settled:
                return states
            assert time.monotonic() < deadline, (
                f"task runs of flow run {flow_run_id} not settled on the Prefect server after {settle_s:.0f} s "
                f"(missing: {sorted(set(expected) - set(states))}; read: {states}): their events were lost"
            )
            last = states
            time.sleep(1.0)


def edit_params(project: Path, section: str, key: str, value) -> None:
    params = yaml.safe_load((project / "params.yaml").read_text())
    params[section][key] = value
    (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))


def lock_held(project: Path) -> bool:
    try:
        check_unlocked(project)
    except PrivharError:
        return True
    return False


def test_the_dag_comes_from_dvc_yaml():
    dag = read_dag(REPO)
    assert STAGES.index("evaluate") < STAGES.index("private-table") < STAGES.index("report")
    assert STAGES.index("assess") < STAGES.index("report")
    # every stage needs its code's fingerprint first (flows/code_deps.py); the edges below are those between stages
    assert all("code" in stage.upstream for stage in dag if stage.name != "code")
    upstream = {
        stage.name: tuple(name for name in stage.upstream if name != "code") for stage in dag
    }
    dprp = [f"dprp@{epsilon}" for epsilon in ("2.0", "8.0")]
    assert upstream["pretrain"] == ("decode-public",) and upstream["train"] == (
        "decode",
        "pretrain",
    )
    assert upstream["budget"] == (
        "decode",
    )  # every DP stage's privacy.max_epsilon verdicts, planned in one place
    # train-dprp scores its pilot seeds on the raw test split (report.seed_rule: --score-on data/decode)
    assert upstream["dprp@8.0"] == ("budget", "decode") and upstream["train-dprp@8.0"] == (
        "decode",
        "dprp@8.0",
        "pretrain",
    )
    assert upstream["train-anonymize@avatar"] == ("anonymize@avatar", "pretrain")
    assert upstream["train-private@maskdp"] == ("anonymize@avatar", "budget", "decode", "pretrain")
    # evaluate depends on data/dprp, data/anonymize, data/train, data/private and data/federated, the parents of those stages' outputs
    anonymize = sorted(
        f"anonymize@{method}" for method in ("avatar", "face_blur", "low_res_32x24", "blackout")
    )
    trained = sorted(f"train-{name}" for name in anonymize + dprp)
    methods = load_section(
        REPO / "params.yaml", "private", PrivateParams
    ).methods  # one stage per method of params.yaml
    assert {"dp_sgd", "dp_sgd_person", "maskdp"} <= set(methods)
    private = [f"train-private@{method}" for method in methods]
    assert upstream["evaluate"] == tuple(
        sorted(["decode", "train", "train-federated", *dprp, *anonymize, *trained, *private])
    )
    assert "train-federated" in upstream["report"]
    assert [stage.name for stage in read_dag(REPO, ["decode"])] == [
        "code",
        "scan",
        "synthesize",
        "decode",
    ]
    assert upstream["synthesize"] == (
        "scan",
    )  # the real dataset's file listing (re-made every run, as the code's fingerprints are)
    assert upstream["code"] == ()
    with pytest.raises(PrivharError, match="no stage 'nope' in dvc.yaml"):
        read_dag(REPO, ["nope"])
    # a foreach group by its name, as `dvc repro anonymize` takes it (issue 61: the runner refused it after the work)
    grouped = [stage.name for stage in read_dag(REPO, ["anonymize"])]
    assert sorted(name for name in grouped if name.startswith("anonymize@")) == anonymize
    assert "train" not in grouped and grouped[-1].startswith("anonymize@")


def shared_flow_run():
    """The shared run's flow run: the first to end on its database, created by ``privhar flow`` on the deployment."""
    from prefect import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterState
    from prefect.client.schemas.sorting import FlowRunSort

    ended = FlowRunFilter(state=FlowRunFilterState(type={"any_": ["COMPLETED", "FAILED"]}))
    with get_client(sync_client=True) as client:
        first = client.read_flow_runs(
            flow_run_filter=ended, sort=FlowRunSort.START_TIME_ASC, limit=1
        )[0]
        return first, client.read_deployment(first.deployment_id)


def test_flow_runs_every_stage_then_skips_them_all(project):
    flow_run, deployment = shared_flow_run()
    assert flow_run.state.is_completed(), flow_run.state.message
    # privhar flow with nothing serving: a run of the deployment, registered with its schedule paused
    assert deployment.name == "scheduled" and flow_run.deployment_id == deployment.id
    assert "manual" in flow_run.tags and flow_run.parameters["stages"] == []
    ran = task_states(flow_run.id)
    stages = [
        stage.name.rsplit(":", 1)[-1] for stage in read_dag(project)
    ]  # addressed from outside the project
    assert (
        "train-private@maskdp" in stages and "train-private@multiclip" not in stages
    )  # the project's params
    assert {name: ran[name] for name in stages} == {name: "Completed" for name in stages}
    assert not [
        name for name in ran if "[" in name
    ]  # one machine: no shard tasks, each stage dvc repro's own
    status = json.loads(sh("dvc", "status", "--json", cwd=project).stdout)
    assert status == {
        "code": ["always changed"],
        "scan": ["always changed"],
    }  # code and scan run every time
    again = run_flow(project)
    assert again.is_completed()
    assert 0.0 <= again.result()["baseline"]["top1"] <= 1.0  # scored from the run's outputs
    assert task_runs(again, tuple(stages)) == {
        name: "Completed" if name in ("code", "scan") else "Skipped" for name in stages
    }


def test_privhar_flow_is_a_run_of_the_deployment_named_for_its_stages(project):
    """``privhar flow`` (make run) with nothing serving: a run of ``privhar-pipeline/scheduled``, registered with its
    schedule paused; a run of one stage is named for it in MLflow and prints no table of scores it did not make."""
    from mlflow import MlflowClient
    from prefect import get_client
    from prefect.client.schemas.sorting import FlowRunSort

    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(
        [str(BIN / "privhar"), "flow", "decode"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ""  # decode scores nothing
    with get_client(sync_client=True) as client:
        deployment = client.read_deployment_by_name("privhar-pipeline/scheduled")
        newest = client.read_flow_runs(sort=FlowRunSort.START_TIME_DESC, limit=1)[0]
    assert newest.deployment_id == deployment.id and deployment.paused
    assert newest.parameters["stages"] == ["decode"] and "manual" in newest.tags
    assert newest.state.is_completed()
    client = MlflowClient(
        os.environ["MLFLOW_TRACKING_URI"]
    )  # the shared run's store (fixture project)
    parent = client.search_runs(
        [experiment.experiment_id for experiment in client.search_experiments()],
        "tags.`privhar.pipeline` = 'true'",
        order_by=["attributes.start_time DESC"],
        max_results=1,
    )[0]
    assert parent.info.run_name == "pipeline decode"
    assert parent.data.tags["privhar.targets"] == "decode"


def test_a_failing_stage_fails_its_task_with_its_one_line_error(small, tmp_path):
    original = (small / "params.yaml").read_text()
    try:
        params = yaml.safe_load(original)
        root = tmp_path / "dataset"
        (root / "Walking").mkdir(parents=True)
        os.symlink(root, root / "Walking" / "again", target_is_directory=True)
        params["data"].update(source="ucf101", root=str(root), split=1)
        (small / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
        # valid params naming a folder (a missing one is refused before any stage); the first stage (scan) finds a
        # link loop in it. The public set's stages need no dataset and run on (up to decode-public: pretrain's
        # training has nothing to show here)
        state = run_flow(small, stages=["decode", "decode-public"])
        assert state.is_failed()
        message = str(state.result(raise_on_failure=False))
        assert message.startswith(
            f"stage scan failed: data.root: {root / 'Walking' / 'again'} is {root} again (a symbolic link loop)"
        ), message
        assert "\n" not in message and message.endswith(
            "not run: synthesize, decode"
        )  # the stages not run, named
        # decode-public ran to the end, read from DVC: the Prefect server's task runs come from this process's events,
        # and under CI load all of this flow's were lost (twice in three CI runs of 2026-11-29); scan's failure is the
        # flow's own message above
        assert "decode-public" not in sh("dvc", "status", "decode-public", cwd=small).stdout
        assert (small / "data/public/decode/manifest.parquet").exists()
    finally:
        (small / "params.yaml").write_text(original)


def test_invalid_params_stop_the_flow_before_any_stage(small):
    """Issue 35: every params section is checked before the first stage, so a typo in the last stage's section is not
    found by that stage after the others ran."""
    original = (small / "params.yaml").read_text()
    try:
        for section, key, value in (("train", "epochs", 0), ("report", "seeds", 0)):
            edit_params(small, section, key, value)
            state = run_flow(small)
            assert state.is_failed()
            message = str(state.result(raise_on_failure=False))
            assert message == (
                f"{small / 'params.yaml'}: {section}.{key} = 0 is invalid: input should be greater than 0"
            )
            assert task_runs(state) == {}  # no stage ran
            (small / "params.yaml").write_text(original)
    finally:
        (small / "params.yaml").write_text(original)


def test_a_second_run_is_refused_while_one_holds_the_project(small):
    with project_lock(small, "a test run"):
        state = run_flow(small)
        assert state.is_failed()
        assert "a pipeline run is already in progress (a test run, pid" in str(
            state.result(raise_on_failure=False)
        )
        refused = subprocess.run(
            [str(BIN / "privhar"), "flow"], cwd=small, capture_output=True, text=True, timeout=120
        )
        assert (
            refused.returncode == 1
            and "already in progress" in refused.stderr
            and "Traceback" not in refused.stderr
        )


def test_a_killed_stage_leaves_no_partial_output_and_the_next_run_redoes_it(small):
    """decode killed mid-way: its old, complete output stays (never a partial one), DVC still sees it stale, the run
    lock goes with the killed run, and the next run redoes decode (the runs stop at decode: the public set, pretrain
    and train have nothing to do with it)."""
    assert run_flow(
        small, stages=["decode"]
    ).is_completed()  # decode up to date first (a failed stage's outputs are gone)
    data = small / "data"
    before = (data / "decode" / "manifest.parquet").read_bytes()
    edit_params(
        small, "decode", "short_videos", "pad"
    )  # decode is stale; its output bytes will not change
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    # decode alone (decode-public is stale too, and its dvc process must not outlive the kill)
    process = subprocess.Popen(
        [str(BIN / "privhar"), "flow", "decode"],
        cwd=small,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 120
    while not list(data.glob(".decode.tmp-*")) and time.monotonic() < deadline:
        time.sleep(0.02)
    os.killpg(process.pid, signal.SIGKILL)  # mid-way through decode
    process.wait()
    deadline = (
        time.monotonic() + 30
    )  # the lock is held until the killed run's dvc and stage have ended
    while time.monotonic() < deadline and lock_held(small):
        time.sleep(0.1)
    assert time.monotonic() < deadline, "decode never started"
    if (data / "decode").exists():  # the old, complete output: never a partial one
        assert (data / "decode" / "manifest.parquet").read_bytes() == before
    assert "decode" in sh("dvc", "status", cwd=small).stdout  # DVC still sees decode as not done
    state = run_flow(small, stages=["decode"])  # the run lock died with its holder and its work
    assert state.is_completed(), state.message
    # decode redone, read from DVC rather than from the Prefect server's task runs: those come from events, and under
    # load a whole task's events were lost (EventsWorker failed to process an item; CI of stop 68)
    assert "decode" not in sh("dvc", "status", "decode", cwd=small).stdout
    assert (data / "decode" / "manifest.parquet").read_bytes() == before  # pad: the same clips
    assert not list(data.glob(".decode.tmp-*"))


def test_every_flow_parameter_has_a_type_and_a_description_in_the_prefect_ui():
    """The deployment's run form shows each parameter's type and what it means (issue 36: `stages` had neither)."""
    from prefect.utilities.callables import parameter_schema

    from flows.pipeline_flow import pipeline_flow

    properties = parameter_schema(pipeline_flow.fn).model_dump()["properties"]
    assert set(properties) == {"project", "profile", "stages", "force"}
    for name, schema in properties.items():
        assert schema.get("description"), name
        assert "type" in schema or "anyOf" in schema, name
    stages = properties["stages"]["anyOf"]
    assert {"type": "array", "items": {"type": "string"}} in stages
