"""The README, a front page: its results table quotes the results pages, and its set-up
separates a user's install from a developer's."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")


def _numbers(text: str) -> set[str]:
    """The numbers written in ``text`` (``1,689`` read as ``1689``; signs dropped)."""
    return {n.replace(",", "") for n in NUMBER.findall(text)}


def _results_rows() -> list[tuple[str, Path]]:
    """The README's results table: each row's result cell and the page it links to."""
    section = (ROOT / "README.md").read_text().split("\n## Results\n", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if len(cells) != 4 or cells[0] in ("what", "---"):
            continue
        link = re.search(r"\]\(([^)#]+)", cells[3])
        assert link, f"README results row without a page: {line}"
        rows.append((cells[1], ROOT / link.group(1)))
    return rows


def test_every_figure_the_readme_quotes_is_on_the_page_it_links_to():
    rows = _results_rows()
    assert len(rows) >= 5
    for result, page in rows:
        missing = sorted(_numbers(result) - _numbers(page.read_text()))
        assert not missing, f"README quotes {missing} that {page.relative_to(ROOT)} does not give"


def test_a_number_missing_from_the_page_is_caught():
    page = "ESOL RMSE **0.810** vs 0.851, 1,689 molecules/s"
    assert _numbers("0.810 vs 0.851; 1,689") <= _numbers(page)
    assert not _numbers("0.65 (target 0.7)") <= _numbers(page)


def test_set_up_separates_a_users_install_from_a_developers():
    for doc in ("README.md", "docs/getting-started.md"):
        text = (ROOT / doc).read_text()
        user = re.search(r'pip install "?\.(\[[a-z,]+\])?"?(?=\s)', text)
        assert user and "test" not in (user.group(1) or ""), f"{doc}: no user install"
        assert 'pip install -e ".[test]"' in text, f"{doc}: no developer install"
        assert text.index(user.group(0)) < text.index('pip install -e ".[test]"'), doc
