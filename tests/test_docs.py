"""The README and the pages under docs/ link only to files and headings that exist.

The README points to docs/learning.md for the learning benchmark, the levers and the default's
rationale, and both point into benchmarks/RESULTS.md; a moved section or a renamed file must not
leave a reader at a dead link.
"""

import re
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")  # the target of a Markdown link or image


def anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@cache
def anchors(page: Path) -> frozenset[str]:
    """The anchors of every heading of `page` (lines starting with #, outside code blocks)."""
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return frozenset(anchor(title) for title in re.findall(r"^#+ (.+)$", text, flags=re.M))


def test_anchor_follows_githubs_rule():
    assert anchor("What the default config is, and why") == "what-the-default-config-is-and-why"
    assert anchor("Experiments at scale: seeds and searches") == (
        "experiments-at-scale-seeds-and-searches"
    )


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.relative_to(REPO).as_posix())
def test_every_relative_link_resolves(page: Path):
    dead = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"[a-z]+:", target):  # http(s), mailto: not checked offline
            continue
        path, _, fragment = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            dead.append(f"{target}: no file {linked.relative_to(REPO)}")
        elif fragment and linked.suffix == ".md" and fragment not in anchors(linked):
            dead.append(f"{target}: no heading #{fragment} in {linked.relative_to(REPO)}")
    assert not dead, f"dead links in {page.relative_to(REPO)}: {dead}"
