"""`privhar plots` (issues 36, 82.34): DVC's plots page renders with the network off, grouped by stage, indexed.

A tiny DVC project with two learning curves (reports/train), Top-1 against ε with intervals (reports/compare) and a
confusion matrix (reports/evaluate), drawn with the project's own templates (.dvc/plots), its page written by
`dvc plots show` with the offline template, opened in headless Chromium with every request outside the page
refused: each vega plot draws, under its stage's heading, each summary chart has a colour and a legend entry per
series, the ε chart an error bar per point, the index at the top links every section, and nothing was fetched.
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
      template: series
      x: epoch
      y:
        reports/train/history.csv: [train_accuracy, test_accuracy]
  - Top-1 against ε:
      template: intervals
      x: target_epsilon
      y:
        reports/compare/accuracy_vs_epsilon.csv: top1
"""
CURVES = """method,target_epsilon,top1,low,high
dp_sgd,1.0,0.6,0.55,0.65
dp_sgd,8.0,0.8,0.78,0.82
maskdp,1.0,0.4,0.3,0.5
maskdp,8.0,0.7,0.65,0.75
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
    (tmp_path / "reports/compare").mkdir(parents=True)
    (tmp_path / "reports/train/history.csv").write_text(
        "epoch,train_accuracy,test_accuracy\n1,0.2,0.3\n2,0.5,0.4\n3,0.7,0.6\n"
    )
    (tmp_path / "reports/compare/accuracy_vs_epsilon.csv").write_text(CURVES)
    shutil.copytree(REPO / ".dvc/plots", tmp_path / ".dvc/plots")  # the project's templates
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
        page.locator("svg.marks, canvas.marks").nth(2).wait_for(state="attached", timeout=30_000)
        headings = page.locator("details > summary > h2").all_inner_texts()
        index = page.locator("nav#privhar-index a").all_inner_texts()
        opened = page.eval_on_selector_all(
            "#privhar-plots > details", "all => all.map(d => d.open)"
        )
        drawn = page.locator("svg.marks, canvas.marks").count()
        charts = page.locator("#section-Summary > div")
        legends = [
            chart.locator("g.role-legend-label text").all_text_contents() for chart in charts.all()
        ]
        error_bars = charts.nth(1).locator("g.mark-rule.role-mark > *").count()
        page.click("nav#privhar-index >> text=evaluate (1)")
        unfolded = page.eval_on_selector("#section-evaluate", "d => d.open")
        browser.close()
    assert drawn == 3 and fetched == []
    assert headings == index == ["Summary (2)", "evaluate (1)"]  # the named plots first
    assert opened == [True, False] and unfolded  # evaluate folds until its link is followed
    assert legends[0][:2] == ["history test_accuracy", "history train_accuracy"]
    assert legends[1][:2] == ["dp_sgd", "maskdp"]  # a legend entry per method
    assert error_bars == 4  # a 95 % interval per point


def test_without_vega_installed_plots_is_one_line(tmp_path):
    sh("git", "init", "-q", cwd=tmp_path)
    sh("dvc", "init", "-q", cwd=tmp_path)
    with pytest.raises(PrivharError) as refused:
        show_plots(tmp_path, tmp_path / "plots")
    message = str(refused.value)
    assert "vega.min.js: not found" in message and "npm install --prefix build/vega" in message
    assert "\n" not in message and not (tmp_path / TEMPLATE).exists()
