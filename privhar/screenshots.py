"""``privhar screenshots``: what a user browses after ``make run``, taken in headless Chromium (issue 36).

The project's MLflow UI and Prefect server are started on free loopback ports (and stopped after), the plots page
is written by :mod:`privhar.plots_page`, and each page is saved as a PNG in the output folder:

- ``mlflow-runs.png``: the experiment as MLflow opens it (the runs list, not the GenAI overview);
- ``mlflow-top1-vs-epsilon.png``: the report stage's leaf runs (a run per model and ε) compared, Top-1 against ε;
- ``mlflow-champion.png``: the version of ``privhar-dp_sgd`` its ``champion`` alias names: ε, δ, Top-1, description;
- ``prefect-runs.png`` and ``prefect-flow-run.png``: the flow runs, then the newest one's task graph and logs;
- ``plots.png``: DVC's plots page with the network off (learning curves, Top-1 against ε).

Each page is found by what a person sees (a role, a text), never by a CSS class, so a UI upgrade that keeps its
words keeps the script working. Chromium is Debian's ``/usr/bin/chromium``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from flows.prefect_server import prefect_server
from flows.servers import free_port
from privhar.mlflow_ui import experiment_url, mlflow_ui
from privhar.plots_page import show_plots
from tasks.core.errors import PrivharError

LOG = logging.getLogger("tasks.screenshots")
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
]
HOST = "127.0.0.1"
WAIT_MS = int(os.environ.get("PRIVHAR_SCREENSHOT_WAIT_S", "90")) * 1000
CHAMPION_MODEL = "privhar-dp_sgd"


@contextlib.contextmanager
def project_servers(project: Path) -> Iterator[dict[str, str]]:
    """The MLflow UI and the Prefect server over the project's stores, each on a free port, stopped on exit."""
    servers = {
        "mlflow": mlflow_ui(project, HOST, free_port()),
        "prefect": prefect_server(project, HOST, free_port()),
    }
    started = []
    try:
        for server in servers.values():
            if server.start():
                started.append(server)
        yield {name: f"http://{HOST}:{server.port}" for name, server in servers.items()}
    finally:
        for server in started:
            server.stop()


@contextlib.contextmanager
def shown(page: Any, name: str, out: Path) -> Iterator[None]:
    """A page step: a wait that times out is one line naming the page, with a picture of what it showed instead."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        yield
    except PlaywrightTimeout as error:
        failed = out / f"{name}-failed.png"
        page.screenshot(path=str(failed))
        raise PrivharError(
            f"screenshots: {name}: {page.url}: {str(error).splitlines()[0]} (the page as it was: {failed})"
        ) from None


def take_screenshots(project: Path, out: Path) -> list[Path]:
    """Every page above as ``out/<name>.png``; return the files written."""
    project = Path(project).resolve()
    if not (project / "mlflow.db").is_file():
        raise PrivharError(f"{project}/mlflow.db: no MLflow store here (run make run first)")
    if not CHROMIUM.exists():
        raise PrivharError(f"{CHROMIUM}: no Chromium (apt-get install chromium)")
    out.mkdir(parents=True, exist_ok=True)
    plots = show_plots(project, project / "build" / "plots")
    from playwright.sync_api import sync_playwright

    with project_servers(project) as urls, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            shots = [
                *mlflow_pages(browser, urls["mlflow"], project, out),
                *prefect_pages(browser, urls["prefect"], out),
                offline_plots(browser, Path(plots), out),
            ]
        finally:
            browser.close()
    return shots


def new_page(browser: Any, offline: bool = False) -> Any:
    context = browser.new_context(viewport={"width": 1600, "height": 1000}, offline=offline)
    page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    return page


def close_assistant(page: Any) -> None:
    """MLflow 3.17's assistant panel takes a third of the width: closed where it is open."""
    panel = page.get_by_role("button", name="Close", exact=True)
    if panel.count():
        panel.first.click()


def saved(page: Any, path: Path) -> Path:
    page.wait_for_timeout(1500)  # charts animate in
    page.screenshot(path=str(path))
    page.context.close()
    LOG.info("screenshots: %s", path)
    return path


def mlflow_pages(browser: Any, base: str, project: Path, out: Path) -> list[Path]:
    """The runs list, Top-1 against ε over the report's leaf runs, and the champion in the registry."""
    from mlflow import MlflowClient

    from tasks.core.tracking import configure

    experiment = configure(project)
    page = new_page(browser)
    with shown(page, "mlflow-runs", out):
        page.goto(experiment_url(base, experiment))
        page.get_by_role("grid").first.get_by_role("link").first.wait_for()
        close_assistant(page)
    shots = [saved(page, out / "mlflow-runs.png")]
    client = MlflowClient()
    shots.append(top1_against_epsilon(browser, base, experiment, client, out))
    champion = client.get_model_version_by_alias(CHAMPION_MODEL, "champion").version
    page = new_page(browser)
    with shown(page, "mlflow-champion", out):
        page.goto(
            f"{base}/#/models/{CHAMPION_MODEL}/versions/{champion}?workflowType=machine_learning"
        )
        page.get_by_text("champion").first.wait_for()
        close_assistant(page)
    shots.append(saved(page, out / "mlflow-champion.png"))
    return shots


def top1_against_epsilon(browser: Any, base: str, experiment: str, client: Any, out: Path) -> Path:
    """MLflow's compare view of the newest report stage's leaf runs, its scatter plot set to ε (x) and Top-1 (y)."""
    reports = client.search_runs(
        [experiment],
        "tags.`privhar.stage` = 'report'",
        order_by=["attributes.start_time DESC"],
        max_results=1,
    )
    if not reports:
        raise PrivharError("mlflow.db: no report stage run (run make run first)")
    leaves = client.search_runs(
        [experiment],
        f"tags.mlflow.parentRunId = '{reports[0].info.run_id}'",
        max_results=200,
    )
    ids = [run.info.run_id for run in leaves if "epsilon" in run.data.metrics]
    query = urllib.parse.urlencode(
        {
            "runs": json.dumps(ids),
            "experiments": json.dumps([experiment]),
            "workflowType": "machine_learning",
        }
    )
    page = new_page(browser)
    with shown(page, "mlflow-top1-vs-epsilon", out):
        page.goto(f"{base}/#/compare-runs?{query}")
        page.get_by_role("tab", name="Scatter Plot").click()
        for axis, metric in (("X-axis:", "epsilon"), ("Y-axis:", "top1")):
            page.get_by_role("combobox", name=axis).click()
            page.get_by_role("option", name=metric, exact=True).first.click()
        close_assistant(page)
    return saved(page, out / "mlflow-top1-vs-epsilon.png")


def prefect_pages(browser: Any, base: str, out: Path) -> list[Path]:
    """The flow runs list, then the newest flow run (its task graph and logs)."""
    page = new_page(browser)
    with shown(page, "prefect-runs", out):
        page.goto(f"{base}/runs")
        page.get_by_text("privhar-pipeline").first.wait_for()
    shots = [saved(page, out / "prefect-runs.png")]
    newest = prefect_flow_runs(base)[0]
    page = new_page(browser)
    with shown(page, "prefect-flow-run", out):
        page.goto(f"{base}/runs/flow-run/{newest['id']}")
        page.get_by_text(newest["name"]).first.wait_for()
    shots.append(saved(page, out / "prefect-flow-run.png"))
    return shots


def prefect_flow_runs(base: str) -> list[dict[str, Any]]:
    """The project's flow runs, newest first, from the Prefect API."""
    import urllib.request

    request = urllib.request.Request(
        f"{base}/api/flow_runs/filter",
        data=json.dumps({"sort": "START_TIME_DESC", "limit": 5}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        runs = json.loads(answer.read())
    if not runs:
        raise PrivharError("the project's Prefect database holds no flow run (run make run first)")
    return runs


def offline_plots(browser: Any, page_file: Path, out: Path) -> Path:
    """DVC's plots page from disk with the network off: the vega it inlines must draw every plot."""
    page = new_page(browser, offline=True)
    with shown(page, "plots", out):
        page.goto(page_file.resolve().as_uri())
        page.locator("svg, canvas").first.wait_for()
    return saved(page, out / "plots.png")
