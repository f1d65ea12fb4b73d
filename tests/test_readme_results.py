"""README's results paragraph quotes the committed run (issue 36): every `mean ± interval` it gives is a row of
reports/results.md, and docs/index.md carries the same paragraph — a rerun that changes the numbers fails here until
the paragraph is rewritten from the new reports."""

import re

from tests.conftest import REPO

HEADING = "## Results, in one paragraph"


def paragraph(text: str) -> str:
    return text.split(HEADING, 1)[1].split("\n## ", 1)[0].strip()


def test_readme_quotes_only_numbers_of_the_committed_results():
    readme = paragraph((REPO / "README.md").read_text())
    results = (REPO / "reports" / "results.md").read_text()
    quoted = re.findall(r"(\d+\.\d) ± (\d+\.\d)", readme)
    assert len(quoted) >= 10, "the paragraph quotes the rows' intervals"
    missing = [f"{mean} ± {half}" for mean, half in quoted if f"{mean} ± {half}" not in results]
    assert not missing, f"README quotes intervals reports/results.md does not hold: {missing}"


def test_the_docs_home_carries_the_readme_paragraph():
    docs = paragraph((REPO / "docs" / "index.md").read_text())
    readme = paragraph((REPO / "README.md").read_text())
    assert " ".join(docs.split()) == " ".join(readme.split())
