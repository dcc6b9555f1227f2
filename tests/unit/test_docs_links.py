"""The documentation holds together: every relative link in README.md and docs/ resolves (the file, and the
heading when the link names one), the paths docs/architecture.md names exist, and the README stays a manual
of at most 300 lines. Pure file reads: no imports from the project, well under a second."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README_MAX_LINES = 300
# The pages whose links are checked: the manual, docs/, and the READMEs the docs link to.
PAGES = sorted(
    {
        ROOT / "README.md",
        *ROOT.glob("docs/*.md"),
        ROOT / "rmqha" / "pipeline" / "README.md",
        ROOT / "images" / "README.md",
        ROOT / "compose" / "README.md",
        ROOT / "tools" / "mutation" / "README.md",
    }
)
PAGES = [p for p in PAGES if p.exists()]

_FENCE = re.compile(r"^\s*(```|~~~)")
_LINK = re.compile(r"(?<!\!)\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def prose_lines(text: str):
    """(line number, line) outside fenced code blocks, with inline code spans blanked."""
    fenced = False
    for n, line in enumerate(text.splitlines(), 1):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield n, re.sub(r"`[^`]*`", lambda m: " " * len(m.group(0)), line)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: inline markup dropped, lower case, punctuation removed, spaces to '-'."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    fenced = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        m = None if fenced else _HEADING.match(line)
        if m:
            base = slug(m.group(2))
            k = seen.get(base, 0)
            seen[base] = k + 1
            out.add(base if k == 0 else f"{base}-{k}")
    return out


def links(page: Path):
    for n, line in prose_lines(page.read_text(encoding="utf-8")):
        for m in _LINK.finditer(line):
            yield n, m.group(1) or m.group(2)


def broken_links(page: Path, root: Path = ROOT) -> list[str]:
    out = []
    for n, target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        where = f"{page.relative_to(root)}:{n}: {target}"
        if not dest.exists():
            out.append(f"{where}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            out.append(f"{where}: no heading #{anchor} in {dest.name}")
    return out


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    assert broken_links(page) == []


def test_the_readme_is_a_manual_of_at_most_300_lines():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines (at most {README_MAX_LINES}): move detail to docs/"


def test_the_readme_names_the_command_ci_runs():
    ci = (ROOT / ".ci" / "run").read_text()
    command = [ln for ln in ci.splitlines() if ln.strip() and not ln.startswith(("#", "set ", "cd "))][-1].strip()
    assert command == "make test"
    assert re.search(r"^make test\b", (ROOT / "README.md").read_text(), re.M)


def test_the_paths_architecture_names_exist():
    """Every repository path in backticks in docs/architecture.md (a folder/ or folder/file) exists."""
    tops = {p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith(".")}
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    named = {m.group(1).rstrip("/") for m in re.finditer(r"`([\w.-]+/[\w./-]*)`", text)}
    missing = sorted(p for p in named if p.split("/")[0] in tops and not (ROOT / p).exists())
    # The folder table names files relative to its folder: `folder/` | ... `module.py` ... `sub/`
    for m in re.finditer(r"^\| `([\w./-]+)/` \|([^|]*)\|", text, re.M):
        folder = ROOT / m.group(1)
        for name in re.findall(r"`([\w./-]+(?:\.(?:py|c|rs|sh|toml)|/))`", m.group(2)):
            name = name.rstrip("/")
            if not (folder / name).exists() and not any(folder.rglob(name)):
                missing.append(f"{m.group(1)}/ ... {name}")
    assert missing == []


def test_the_checker_finds_what_it_must(tmp_path):
    """The checks can fail: a missing file and a missing heading are reported; links in code are not."""
    assert slug("5. SYNC_MASTER: the wait (`GroupTransferService`)") == "5-sync_master-the-wait-grouptransferservice"
    assert slug("ACL, and what 4.9 leaves open") == "acl-and-what-49-leaves-open"
    (tmp_path / "b.md").write_text("# B\n\n## Real heading\n\n## Real heading\n")
    page = tmp_path / "a.md"
    page.write_text(
        "[gone](gone.md), [bad](b.md#no-such-heading), [ok](b.md#real-heading),\n"
        "[dup](b.md#real-heading-1), [self](#a), `[code](gone.md)`\n\n# A\n\n```\n[fenced](gone.md)\n```\n"
    )
    assert [p.split(": ")[1] for p in broken_links(page, tmp_path)] == ["gone.md", "b.md#no-such-heading"]
