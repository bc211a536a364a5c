"""Every relative link in README.md and docs/*.md resolves inside the repository, and no
text points at ../shared/: a clone has this repository and nothing beside it.

Anchors are GitHub's heading slugs (lower case, punctuation dropped, spaces to hyphens,
-1, -2 for repeats); links in fenced code blocks and code spans are not links.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHARED_SCAN = [ROOT / "README.md", ROOT / "docs", ROOT / "examples", ROOT / "autotune"]

FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
CODE_SPAN = re.compile(r"(`+)(?:(?!\n\s*\n).)+?\1", re.DOTALL)
INLINE = re.compile(r"\[[^\]]*\]\(\s*<?([^)\s>]+)>?[^)]*\)")
REFERENCE = re.compile(r"^ {0,3}\[[^\]^][^\]]*\]:[ \t]*<?([^\s>]+)", re.MULTILINE)
HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+(.+?)[ \t#]*$", re.MULTILINE)
SCHEME = re.compile(r"^[a-zA-Z][\w+.-]*:")


def prose(text: str) -> str:
    """`text` with every fenced code block blanked (line numbers kept)."""
    out: list[str] = []
    fence = ""
    for line in text.splitlines():
        m = FENCE.match(line)
        if fence:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence):
                fence = ""
            out.append("")
        elif m:
            fence = m.group(1)
            out.append("")
        else:
            out.append(line)
    return "\n".join(out)


def slugs(page: Path) -> set[str]:
    seen: Counter[str] = Counter()
    found = set()
    for heading in HEADING.findall(prose(page.read_text())):
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
        slug = re.sub(r"[^\w\- ]", "", re.sub(r"<[^>]+>", "", text).lower()).replace(" ", "-")
        found.add(f"{slug}-{seen[slug]}" if seen[slug] else slug)
        seen[slug] += 1
    return found


def broken_links(page: Path) -> list[str]:
    text = CODE_SPAN.sub("", prose(page.read_text()))
    problems = []
    for target in INLINE.findall(text) + REFERENCE.findall(text):
        if SCHEME.match(target):
            continue  # http(s), mailto: not a file of this repository
        path, _, anchor = unquote(target).partition("#")
        base = ROOT if path.startswith("/") else page.parent
        dest = (base / path.lstrip("/")).resolve() if path else page
        if not dest.is_relative_to(ROOT):
            problems.append(f"{target}: outside the repository")
        elif not dest.exists():
            problems.append(f"{target}: {dest.relative_to(ROOT)} does not exist")
        elif anchor and dest.suffix == ".md" and anchor not in slugs(dest):
            problems.append(f"{target}: no heading #{anchor} in {dest.relative_to(ROOT)}")
    return problems


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve_inside_the_repository(page: Path) -> None:
    problems = broken_links(page)
    assert not problems, "\n".join(problems)


def test_nothing_points_at_shared_outside_the_repository() -> None:
    files = [f for p in SHARED_SCAN for f in ([p] if p.is_file() else sorted(p.rglob("*")))]
    hits = []
    for f in files:
        data = b"" if "__pycache__" in f.parts or not f.is_file() else f.read_bytes()
        if b"\0" in data:
            continue  # an image, not text
        for n, line in enumerate(data.decode(errors="replace").splitlines(), 1):
            if "../shared/" in line:
                hits.append(f"{f.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not hits, "a clone has no ../shared; put the file in the repository:\n" + "\n".join(hits)
