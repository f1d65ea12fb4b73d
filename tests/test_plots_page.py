"""`privhar plots` (issue 36): DVC's plots page renders with the network off, grouped by stage.

A tiny DVC project with a learning curve (reports/train) and a confusion matrix (reports/evaluate), its page written
by `dvc plots show` with the offline template, opened in headless Chromium with every request outside the page
refused: each vega plot draws, under its stage's heading, and nothing was fetched.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from privhar.plots_page import TEMPLATE, VEGA_ROOT, show_plots
from tasks.core.errors import PrivharError
from tests.conftest import REPO, sh

CHROMIUM = Path("/usr/bin/chromium")
DVC_YAML = """
plots:
  - reports/evaluate/confusion.csv:
      template: confusion
      x: actual
      y: predicted
  - Learning curve:
      x: epoch
      y:
        reports/train/history.csv: [train_accuracy]
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    if not (REPO / VEGA_ROOT / "node_modules").is_dir():
        pytest.skip(
            f"{VEGA_ROOT} is not installed (make install runs npm install; npm is missing here)"
        )
    sh("git", "init", "-q", cwd=tmp_path)
    sh("dvc", "init", "-q", cwd=tmp_path)
    (tmp_path / "dvc.yaml").write_text(DVC_YAML)
    (tmp_path / "reports/train").mkdir(parents=True)
    (tmp_path / "reports/evaluate").mkdir(parents=True)
    (tmp_path / "reports/train/history.csv").write_text(
        "epoch,train_accuracy\n1,0.2\n2,0.5\n3,0.7\n"
    )
    (tmp_path / "reports/evaluate/confusion.csv").write_text(
        "actual,predicted\nwalk,walk\nwalk,run\nrun,run\n"
    )
    shutil.copytree(REPO / VEGA_ROOT / "node_modules", tmp_path / VEGA_ROOT / "node_modules")
    return tmp_path


def test_the_plots_page_renders_offline_grouped_by_stage(project):
    page_path = show_plots(project, project / "plots")
    html = page_path.read_text()
    assert "cdn.jsdelivr" not in html and "<script src=" not in html  # vega is inlined
    assert "plots_template.html" in (project / ".dvc/config.local").read_text()
    if not CHROMIUM.exists():
        pytest.skip(f"no browser at {CHROMIUM}: the page was written, its rendering not checked")
    from playwright.sync_api import sync_playwright

    fetched: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=["--no-sandbox", "--disable-gpu"]
        )
        context = browser.new_context(offline=True)
        context.route(
            "**/*",
            lambda route: (
                route.continue_()
                if route.request.url.startswith("file:")
                else (fetched.append(route.request.url), route.abort())
            ),
        )
        page = context.new_page()
        page.goto(page_path.as_uri())
        page.locator("svg.marks, canvas.marks").nth(1).wait_for(timeout=30_000)
        headings = page.locator("section > h2").all_inner_texts()
        drawn = page.locator("svg.marks, canvas.marks").count()
        browser.close()
    assert drawn == 2 and fetched == []
    assert headings == [
        "Summary",
        "evaluate",
    ]  # the named learning curve first, then by reports folder


def test_without_vega_installed_plots_is_one_line(tmp_path):
    sh("git", "init", "-q", cwd=tmp_path)
    sh("dvc", "init", "-q", cwd=tmp_path)
    with pytest.raises(PrivharError) as refused:
        show_plots(tmp_path, tmp_path / "plots")
    message = str(refused.value)
    assert "vega.min.js: not found" in message and "npm install --prefix build/vega" in message
    assert "\n" not in message and not (tmp_path / TEMPLATE).exists()
