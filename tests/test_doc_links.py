"""Every relative link and anchor in README.md and docs/**/*.md resolves inside the repository.

Links are read from the Markdown (inline ``[text](target)`` and reference definitions
``[id]: target``), code spans and fenced blocks left out; a target outside the repository
(``http:``, ``https:``, ``mailto:``) is not this test's business. An anchor must be the GitHub
slug of a heading of the file it names (lowercase, punctuation dropped, spaces to ``-``,
repeated headings numbered ``-1``, ``-2``)."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
_FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
_CODE = re.compile(r"`[^`\n]*`")
_INLINE = re.compile(r"\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REFDEF = re.compile(r"^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.M)
_EXTERNAL = ("http://", "https://", "mailto:", "ftp://")
_PATHLIKE = re.compile(r"^#|[./]")  # "E[distinct experts](B)" in a formula is not a link


def _prose(text: str) -> str:
    return _CODE.sub("", _FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text."""
    text = re.sub(r"`([^`]*)`", r"\1", heading.strip().lower())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: Counter[str] = Counter()
    out = set()
    for m in re.finditer(
        r"^#{1,6}\s+(.+?)\s*#*\s*$", _FENCE.sub("", path.read_text("utf-8")), re.M
    ):
        base = slug(m.group(1))
        out.add(base if seen[base] == 0 else f"{base}-{seen[base]}")
        seen[base] += 1
    return out


def links(path: Path) -> list[str]:
    text = _prose(path.read_text("utf-8"))
    return [*_INLINE.findall(text), *_REFDEF.findall(text)]


def test_slug_follows_github() -> None:
    assert slug("The sequential search: the boundary in minutes, with its interval") == (
        "the-sequential-search-the-boundary-in-minutes-with-its-interval"
    )
    assert (
        slug("`tokenwatt mbu`: a published row by hand") == "tokenwatt-mbu-a-published-row-by-hand"
    )


def broken_links(doc: Path, root: Path = ROOT) -> list[str]:
    """Each relative link of ``doc`` that does not resolve inside ``root``, with why."""
    broken = []
    for target in links(doc):
        if target.startswith(_EXTERNAL) or not _PATHLIKE.search(target):
            continue
        file_part, _, anchor = target.partition("#")
        dest = doc if not file_part else (doc.parent / file_part).resolve()
        if not dest.exists():
            broken.append(f"{target} (no such file)")
        elif not dest.is_relative_to(root):
            broken.append(f"{target} (outside the repository)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target} (no heading with anchor #{anchor})")
    return broken


def test_the_checker_finds_each_kind_of_broken_link(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    (tmp_path / "outside.md").write_text("# Outside\n", "utf-8")
    (root / "other.md").write_text("# A heading\n\n## A heading\n", "utf-8")
    doc = root / "doc.md"
    doc.write_text(
        "[ok](other.md#a-heading-1) [gone](missing.md) [bad](other.md#nowhere)\n"
        "[up](../outside.md) `[code](missing2.md)` [self](#title)\n\n# Title\n\n"
        "```\n[fenced](missing3.md)\n```\n[ref]: other.md#a-heading\n",
        "utf-8",
    )
    assert broken_links(doc, root) == [
        "missing.md (no such file)",
        "other.md#nowhere (no heading with anchor #nowhere)",
        "../outside.md (outside the repository)",
    ]


@pytest.mark.parametrize("doc", DOCS, ids=[p.relative_to(ROOT).as_posix() for p in DOCS])
def test_every_relative_link_resolves(doc: Path) -> None:
    broken = broken_links(doc)
    assert not broken, f"{doc.relative_to(ROOT)}: " + "; ".join(broken)
