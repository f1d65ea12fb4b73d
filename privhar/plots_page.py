"""The page ``dvc plots show`` writes, made to render offline and grouped by stage (issue 36).

DVC's own page loads vega, vega-lite and vega-embed from a CDN, so with no network every data-driven plot (Top-1
against ε, the learning curves, the confusion matrices, the federated rounds) is blank. ``make install`` installs the
same three libraries from the npm registry into ``build/vega`` (the major versions DVC's page names), and
:func:`write_template` inlines them into an HTML template DVC fills (its ``--html-template``, set for the project
with ``dvc config --local plots.html_template``): the page it writes needs nothing else. A script at the end of the
page puts each plot under the heading of the reports folder (the stage) it comes from, in a section that folds, with
an index of the sections at the top; plots named in ``dvc.yaml``'s top-level ``plots`` come first, under "Summary"
(open). Their templates are the project's own (``.dvc/plots``): ``series`` gives each file and column its colour and
legend entry, ``intervals`` draws Top-1 against ε with each point's 95 % interval (issue 82, item 34).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from flows.pipeline import dvc_command, tool_environment
from tasks.core.errors import PrivharError
from tasks.core.storage import atomic_write_bytes

VEGA_PACKAGES = {
    "vega": "5.33.1",
    "vega-lite": "5.23.0",
    "vega-embed": "6.29.0",
}  # the Makefile installs these
VEGA_ROOT = Path("build/vega")
TEMPLATE = Path(
    ".dvc/plots_template.html"
)  # beside DVC's config: plots.html_template is relative to .dvc/

PAGE = """<!DOCTYPE html>
<html>
<head>
  <meta charset="utf-8">
  {refresh_tag}
  <title>privhar plots</title>
  SCRIPTS
  <script>
    // SVG rather than vega-embed's canvas: crisp at any zoom, the legends' text selectable and searchable.
    const dvcEmbed = window.vegaEmbed;
    window.vegaEmbed = (el, spec, opts) => dvcEmbed(el, spec, Object.assign({ renderer: "svg" }, opts));
  </script>
  <style>
    body { font-family: sans-serif; margin: 1em 2em; }
    nav { position: sticky; top: 0; background: white; padding: 0.4em 0; border-bottom: 1px solid #ccc; z-index: 1; }
    nav a { margin-right: 1.2em; }
    details { border-top: 1px solid #ccc; margin-top: 1em; scroll-margin-top: 3em; }
    summary h2 { display: inline; }
    details > div { display: inline-block; vertical-align: top; margin: 0.5em; }
    img { max-width: 640px; }
  </style>
</head>
<body>
  <h1>privhar plots</h1>
  <nav id="privhar-index"></nav>
  <div id="privhar-plots">
    {plot_divs}
  </div>
  <script>
    // Group the plots by the reports folder (the stage) each comes from: DVC names a plot's div after its path.
    // Each group is a section that folds (Summary open), listed with its count in the index at the top; a link
    // from the index unfolds its section.
    (function () {
      const folders = FOLDERS;
      const page = document.getElementById("privhar-plots");
      const index = document.getElementById("privhar-index");
      const groups = new Map([["Summary", []]]);
      for (const div of Array.from(page.children)) {
        const folder = folders.find((name) => (div.id || "").startsWith("reports_" + name + "_"));
        const group = folder || (div.id.startsWith("reports_") ? "other" : "Summary");
        if (!groups.has(group)) groups.set(group, []);
        groups.get(group).push(div);
      }
      for (const [name, divs] of groups) {
        if (!divs.length) continue;
        const section = document.createElement("details");
        section.id = "section-" + name;
        section.open = name === "Summary";
        const title = document.createElement("summary");
        const label = name + " (" + divs.length + ")";
        const heading = document.createElement("h2");
        heading.textContent = label;
        title.appendChild(heading);
        section.appendChild(title);
        divs.forEach((div) => section.appendChild(div));
        page.appendChild(section);
        const link = document.createElement("a");
        link.href = "#" + section.id;
        link.textContent = label;
        link.addEventListener("click", () => { section.open = true; });
        index.appendChild(link);
      }
    })();
  </script>
</body>
</html>
"""


def _script(package: str, root: Path) -> str:
    path = root / "node_modules" / package / "build" / f"{package}.min.js"
    if not path.is_file():
        raise PrivharError(
            f"{path}: not found; expected {package}@{VEGA_PACKAGES[package]} from npm "
            f"(make install runs: npm install --prefix {VEGA_ROOT} {' '.join(f'{k}@{v}' for k, v in VEGA_PACKAGES.items())})"
        )
    code = path.read_text(encoding="utf-8").replace("</script", "<\\/script")
    return f"<script>{code}</script>"


def write_template(project: Path) -> Path:
    """Write the offline template (vega inlined, the grouping script with the project's reports folders) and make
    it the project's ``plots.html_template`` (``.dvc/config.local``: DVC's CDN page stays the default elsewhere)."""
    root = project / VEGA_ROOT
    scripts = "\n".join(_script(package, root) for package in VEGA_PACKAGES)
    reports = project / "reports"
    folders = sorted(
        (path.name for path in reports.iterdir() if path.is_dir()) if reports.is_dir() else [],
        key=len,
        reverse=True,  # the longest first: private_table before private
    )
    page = PAGE.replace(
        "FOLDERS", json.dumps([name.replace(".", "_") for name in folders])
    ).replace("SCRIPTS", scripts)  # the libraries last: their code is not searched for the markers
    atomic_write_bytes(project / TEMPLATE, page.encode("utf-8"))
    configured = subprocess.run(
        dvc_command("config", "--local", "plots.html_template", TEMPLATE.name),
        cwd=project,
        env=tool_environment(),
        capture_output=True,
        text=True,
    )
    if configured.returncode != 0:
        raise PrivharError(
            f"dvc config --local plots.html_template failed: {configured.stderr.strip()}"
        )
    return project / TEMPLATE


def show_plots(project: Path, out: Path) -> Path:
    """``dvc plots show`` into ``out`` with the offline template (written first); the page's path."""
    template = write_template(project)
    shown = subprocess.run(
        dvc_command("plots", "show", "--html-template", str(template), "-o", str(out)),
        cwd=project,
        env=tool_environment(),
        capture_output=True,
        text=True,
    )
    if shown.returncode != 0:
        raise PrivharError(f"dvc plots show failed: {shown.stderr.strip().splitlines()[-1:]}")
    return out / "index.html"
