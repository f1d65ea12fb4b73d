"""Both UIs in a real browser: `privhar serve` and `privhar ui` as a user starts them, driven by headless Chromium.

Both serve the session's one pipeline run (tests/conftest.py: pipeline_run, a `privhar flow` run of the deployment):
the Prefect UI must list the deployment with its schedule and show the run's stage tasks, and the MLflow UI must show
the runs with `delta` and `top1` columns (no ε = ∞ as 1.8e308) and the registered model with its `champion` alias.
A `privhar flow` while `privhar serve` is up runs on the served runner. Screenshots land in the test's tmp folder.

The tests find what a person sees — a role, a label, a text — never a CSS class of MLflow's or Prefect's UI,
and every page is tried again from the start (``retried``) when a step times out under load. Without a
browser (none installed and apt-get cannot install Debian's chromium) the module skips in one line.
"""

import json
import logging
import os
import re
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from flows.servers import answers, free_port
from tests.conftest import BIN

CHROMIUM = Path("/usr/bin/chromium")
# As root and with no network: no sandbox, and none of Chromium's background connections.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
STAGES = {"synthesize", "decode", "train", "evaluate"}


@pytest.fixture(scope="module")
def chromium() -> Path:
    """Debian's Chromium, installed with apt-get if it is missing."""
    if not CHROMIUM.exists():
        for command in (
            ["apt-get", "install", "-y", "--no-install-recommends", "chromium"],
            ["apt-get", "update"],
            ["apt-get", "install", "-y", "--no-install-recommends", "chromium"],
        ):
            if CHROMIUM.exists():
                break
            subprocess.run(
                command,
                capture_output=True,
                timeout=900,
                check=False,
                env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
            )
    if not CHROMIUM.exists():
        pytest.skip(f"no browser: {CHROMIUM} is missing and apt-get install chromium failed")
    return CHROMIUM


def api(base: str, path: str, body: dict | None = None, attempts: int = 20) -> object:
    """One Prefect REST call; 503 (the server's SQLite busy, as under CI load) is retried, as Prefect's client does."""
    request = urllib.request.Request(
        f"{base}{path}",
        data=None if body is None else json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="GET" if body is None else "POST",
    )
    for attempt in range(attempts):
        try:
            with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 - loopback
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as error:
            if error.code != 503 or attempt == attempts - 1:
                raise
            time.sleep(1.0)
    raise AssertionError("unreachable")


def wait_for(check, timeout: float, what: str):
    """Poll ``check`` until it returns something true; a server still starting (HTTP 503) is polled again."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = check()
        except (urllib.error.URLError, ConnectionError):
            value = None
        if value:
            return value
        time.sleep(1.0)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def groups_alive(*pgids: int) -> list[int]:
    alive = []
    for pgid in pgids:
        try:
            os.killpg(pgid, 0)
            alive.append(pgid)
        except ProcessLookupError:
            pass
    return alive


@pytest.fixture(scope="module")
def served(tmp_path_factory, chromium, pipeline_run):
    """The shared run's project with `privhar serve` and `privhar ui` running on free loopback ports."""
    project = pipeline_run.project
    logs = tmp_path_factory.mktemp("served-logs")
    prefect_port, mlflow_port = free_port(), free_port()
    env = pipeline_run.env
    serve = subprocess.Popen(
        [str(BIN / "privhar"), "serve", "--port", str(prefect_port)],
        cwd=project,
        env=env,
        stdout=open(logs / "serve.log", "wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    ui = subprocess.Popen(
        [str(BIN / "privhar"), "ui", "--port", str(mlflow_port)],
        cwd=project,
        env=env,
        stdout=open(logs / "ui.log", "wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    prefect_api = f"http://127.0.0.1:{prefect_port}/api"
    servers = {"serve": serve, "ui": ui}
    try:
        wait_for(
            lambda: (
                answers(f"{prefect_api}/health") and api(prefect_api, "/deployments/filter", {})
            ),
            240,
            f"the deployment on the Prefect server (log: {logs / 'serve.log'})",
        )
        wait_for(lambda: answers(f"http://127.0.0.1:{mlflow_port}/health"), 120, "the MLflow UI")
        servers["server_pgid"] = int((project / ".prefect" / "server.pid").read_text())
        servers["ui_server_pgid"] = int(
            (project / ".mlflow-ui" / f"ui-{mlflow_port}.pid").read_text()
        )
        yield {
            "project": project,
            "prefect": f"http://127.0.0.1:{prefect_port}",
            "api": prefect_api,
            "mlflow": f"http://127.0.0.1:{mlflow_port}",
            "servers": servers,
            "env": env,
        }
    finally:
        for process in (serve, ui):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in (serve, ui):
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
        for key in ("server_pgid", "ui_server_pgid"):
            if key in servers and groups_alive(servers[key]):
                os.killpg(servers[key], signal.SIGKILL)


@pytest.fixture(scope="module")
def flow_run(served) -> dict:
    """The shared run's flow run (the first on the project's database) and its deployment, read through the API."""
    deployment = api(served["api"], "/deployments/name/privhar-pipeline/scheduled")
    completed = {"flow_runs": {"state": {"type": {"any_": ["COMPLETED"]}}}}
    first = api(
        served["api"], "/flow_runs/filter", {**completed, "sort": "START_TIME_ASC", "limit": 1}
    )[0]
    assert first["deployment_id"] == deployment["id"] and "manual" in first["tags"]
    return {"deployment": deployment, "run": first}


@pytest.fixture(scope="module")
def browser(chromium):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(chromium), args=CHROMIUM_ARGS)
        yield launched
        launched.close()


STEP_SECONDS = 60  # one wait on a page; a page that misses it is loaded again (``retried``)
ATTEMPTS = 3


@pytest.fixture
def page(browser, tmp_path):
    context = browser.new_context(viewport={"width": 1900, "height": 1000})
    opened = context.new_page()
    opened.set_default_timeout(STEP_SECONDS * 1000)
    yield opened
    opened.screenshot(path=str(tmp_path / "final.png"))
    context.close()


def retried(page, steps):
    """``steps(page)`` (which loads its page first), again from the start when a wait times out, ATTEMPTS times."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    for attempt in range(1, ATTEMPTS + 1):
        try:
            return steps()
        except PlaywrightTimeout as error:
            if attempt == ATTEMPTS:
                raise
            logging.getLogger(__name__).warning(
                "%s: attempt %d of %d timed out (%s); loading the page again",
                steps.__name__,
                attempt,
                ATTEMPTS,
                str(error).splitlines()[0],
            )


def test_the_deployment_run_ran_every_stage(served, flow_run):
    assert flow_run["deployment"]["schedules"][0]["schedule"]["cron"] == "0 2 * * *"
    tasks = api(
        served["api"], "/task_runs/filter", {"flow_runs": {"id": {"any_": [flow_run["run"]["id"]]}}}
    )
    states = {task["name"]: task["state"]["name"] for task in tasks}
    assert {name: states[name] for name in STAGES} == {name: "Completed" for name in STAGES}


def test_prefect_ui_lists_the_deployment_with_its_schedule(served, flow_run, page, tmp_path):
    def schedule_shown():
        page.goto(f"{served['prefect']}/deployments")
        page.get_by_text("At 02:00 AM every day").wait_for()
        page.get_by_role("link", name="scheduled").first.wait_for()

    retried(page, schedule_shown)
    page.screenshot(path=str(tmp_path / "prefect-deployments.png"))


def test_prefect_ui_shows_the_next_scheduled_run(served, flow_run, page, tmp_path):
    deployment = flow_run["deployment"]["id"]
    upcoming = {
        "deployments": {"id": {"any_": [deployment]}},
        "flow_runs": {"state": {"type": {"any_": ["SCHEDULED"]}}},
    }
    scheduled = wait_for(
        lambda: api(served["api"], "/flow_runs/filter", upcoming),
        180,
        "Prefect's scheduler to create the next scheduled run",
    )
    assert min(run["expected_start_time"] for run in scheduled).endswith("T02:00:00Z")

    def next_run_shown():
        page.goto(f"{served['prefect']}/deployments/deployment/{deployment}")
        page.get_by_text("Next Run").wait_for()
        page.get_by_text(re.compile(r"Scheduled for \d{4}/\d\d/\d\d 02:00:00 AM")).first.wait_for()

    retried(page, next_run_shown)
    page.screenshot(path=str(tmp_path / "prefect-next-run.png"))


def test_prefect_ui_shows_the_flow_runs_stage_tasks(served, flow_run, page, tmp_path):
    def stage_tasks_shown():
        page.goto(f"{served['prefect']}/runs/flow-run/{flow_run['run']['id']}")
        page.get_by_text(re.compile(r"^\d+ Task runs$")).wait_for()  # the stages
        page.get_by_text("Task Runs", exact=True).first.click()
        for stage in STAGES:
            page.get_by_text(stage, exact=True).first.wait_for()

    retried(page, stage_tasks_shown)
    page.screenshot(path=str(tmp_path / "prefect-flow-run.png"))


def tree_node(picker, name: str):
    """The column picker's node labelled exactly ``name`` (a search highlights ``name`` inside longer names too)."""
    matches = picker.get_by_text(name, exact=True)
    matches.first.wait_for()
    for match in matches.all():
        if match.locator("xpath=..").inner_text().strip() == name:
            return match
    raise AssertionError(f"the column picker shows no column named {name!r}")


def expand_until(grid, target):
    """Open nested runs (the "+" button beside a run's name), each once, until ``target`` is in the table."""
    opened: set[str] = set()
    for _ in range(6):  # pipeline → stage → model: three levels at most
        if target.count():
            break
        page = grid.page
        parents = (
            grid.get_by_role("gridcell")
            .filter(has=page.get_by_role("button"))
            .filter(has=page.get_by_role("link"))
        )
        for parent in parents.all():
            name = parent.get_by_role("link").first.inner_text()
            if name not in opened:
                opened.add(name)
                parent.get_by_role("button").first.click()
    target.first.wait_for()
    return target.first


def test_mlflow_ui_shows_runs_with_delta_and_top1_and_no_infinite_epsilon(
    served, flow_run, page, tmp_path
):
    from mlflow import MlflowClient

    client = MlflowClient(served["env"]["MLFLOW_TRACKING_URI"])  # the shared run's store
    experiment = client.get_experiment_by_name(os.environ["PRIVHAR_EXPERIMENT"])
    runs = (
        f"{served['mlflow']}/#/experiments/{experiment.experiment_id}/runs"
        "?searchFilter=tags.%60privhar.method%60%20%3D%20%27baseline%27"
    )

    def show_epsilon_and_top1():
        page.goto(runs)
        grid = page.get_by_role("grid").first
        grid.get_by_role("link").first.wait_for()  # the runs are listed
        page.get_by_role("button", name="Columns", exact=True).click()
        picker = page.get_by_role("dialog").filter(
            has=page.get_by_role("textbox", name="Search columns")
        )
        for metric in ("delta", "top1"):
            picker.get_by_role("textbox", name="Search columns").fill(metric)
            tree_node(picker, metric).click()
        page.keyboard.press("Escape")
        assistant = page.get_by_role(
            "button", name="Close"
        )  # MLflow's assistant panel hides the right-hand columns
        if assistant.count():
            assistant.first.click()
        for metric in ("delta", "top1"):
            grid.get_by_role("columnheader", name=metric, exact=True).first.wait_for()
        return expand_until(
            grid,
            grid.get_by_role("row").filter(has=page.get_by_role("link", name="privhar-baseline")),
        )

    train_row = retried(page, show_epsilon_and_top1)
    page.screenshot(path=str(tmp_path / "mlflow-runs.png"))
    cells = train_row.inner_text()
    assert (
        "1.79769" not in cells
    )  # no ε = ∞ shown as MLflow's largest double: the run is tagged instead
    version = re.search(r"\bv(\d+)\b", cells).group(1)
    run = client.get_run(client.get_model_version("privhar-baseline", version).run_id)
    assert run.data.tags["privhar.epsilon"] == "inf" and "epsilon" not in run.data.metrics
    top1 = client.get_model_version("privhar-baseline", version).tags["top1"]
    assert f"{float(top1):g}" in cells


def test_mlflow_ui_shows_the_champion_alias(served, flow_run, page, tmp_path):
    def champion_shown():
        page.goto(f"{served['mlflow']}/#/models/privhar-baseline")
        page.get_by_text("champion").first.wait_for()
        page.get_by_text("accountant").first.wait_for()

    retried(page, champion_shown)
    page.screenshot(path=str(tmp_path / "mlflow-model.png"))


def privhar_in(served: dict, *arguments: str, timeout: float) -> subprocess.CompletedProcess:
    """``privhar ARGUMENTS`` in the served project, with its servers' environment."""
    return subprocess.run(
        [str(BIN / "privhar"), *arguments],
        cwd=served["project"],
        env=served["env"],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_privhar_flow_with_serve_up_runs_on_the_served_deployment(served, flow_run):
    """A manual run while `privhar serve` is up is created on its deployment and executed by its runner."""
    done = privhar_in(served, "flow", "decode", timeout=600)
    assert done.returncode == 0, done.stderr
    assert "created on the served deployment privhar-pipeline/scheduled" in done.stderr
    manual = {"flow_runs": {"tags": {"all_": ["manual"]}}, "sort": "START_TIME_DESC", "limit": 1}
    newest = api(served["api"], "/flow_runs/filter", manual)[0]
    assert newest["deployment_id"] == flow_run["deployment"]["id"]
    assert newest["state"]["type"] == "COMPLETED" and newest["parameters"]["stages"] == ["decode"]
    assert "decode" in done.stdout  # the served run's log, followed here


def test_stopping_leaves_no_process_behind(served, flow_run):
    servers = served["servers"]
    stopped = privhar_in(served, "serve", "--stop", timeout=120)
    assert stopped.returncode == 0 and "stopped privhar serve" in stopped.stderr
    servers["ui"].send_signal(signal.SIGINT)
    for name in ("serve", "ui"):
        assert servers[name].wait(timeout=60) in (0, 130)
    wait_for(
        lambda: (
            not groups_alive(
                servers["serve"].pid,
                servers["ui"].pid,
                servers["server_pgid"],
                servers["ui_server_pgid"],
            )
        ),
        30,
        "every server process to end",
    )
    assert not (served["project"] / ".prefect" / "server.pid").exists()
