"""A private copy of the project for one mutation run, so the run is immune to edits of the working tree.

A run takes minutes to an hour, and every mutant's child imports the module and collects its tests from
disk. Run against the live tree, a `git rebase`, a checkout or a half-saved file in that time breaks the
children's imports, and those mutants looked killed. So the run first copies what git would see (tracked
files, and untracked ones not ignored: a test written but not yet committed counts), plus the compiled
extensions an editable install builds in place (ignored `*.so`), and the `shared` folder beside the
checkout that some tests read; every child runs there, and the copy is removed at the end.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator

# Never copied when the tree is not a git checkout (or git is missing): environments, caches, outputs.
SKIP_DIRS = {".git", ".venv", ".venv-client5", "__pycache__", ".pytest_cache", "build", "run", "target", "node_modules"}
EXTENSIONS = (".so", ".pyd")


def project_files(root: str) -> list[str]:
    """Paths (relative to root) of the files a run needs: git's view of the tree when it is a checkout."""
    try:
        out = subprocess.run(
            ["git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            capture_output=True,
            check=True,
        ).stdout
        files = [p for p in out.decode("utf-8", "surrogateescape").split("\0") if p]
    except (OSError, subprocess.CalledProcessError):
        files = _walk(root, lambda name: True)
    have = set(files)
    files += [p for p in _compiled_extensions(root) if p not in have]
    return files


def _walk(root: str, want) -> list[str]:
    out = []
    for d, dirs, names in os.walk(root):
        dirs[:] = sorted(x for x in dirs if x not in SKIP_DIRS)
        out += [os.path.relpath(os.path.join(d, n), root) for n in sorted(names) if want(n)]
    return out


def _compiled_extensions(root: str) -> list[str]:
    """Extension modules built in place inside the top-level packages (git ignores them)."""
    out = []
    for top in sorted(os.listdir(root)):
        if top not in SKIP_DIRS and os.path.isfile(os.path.join(root, top, "__init__.py")):
            out += [os.path.join(top, p) for p in _walk(os.path.join(root, top), lambda n: n.endswith(EXTENSIONS))]
    return out


def copy_files(root: str, dest: str, files: list[str]) -> int:
    """Copy files (relative paths) from root to dest, symlinks as symlinks; a file gone since it was
    listed (deleted in the working tree but still in git's index) is skipped. Returns how many."""
    n = 0
    for rel in files:
        src = os.path.join(root, rel)
        if not os.path.lexists(src) or os.path.isdir(src):
            continue
        dst = os.path.join(dest, rel)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copy2(src, dst, follow_symlinks=False)
        n += 1
    return n


@contextlib.contextmanager
def snapshot(root: str) -> Iterator[str]:
    """Copy the project into a temporary folder; yields the copy's root, removed on exit."""
    tmp = tempfile.mkdtemp(prefix="rmqha-mutation-")
    try:
        dest = os.path.join(tmp, os.path.basename(os.path.abspath(root)))
        copy_files(root, dest, project_files(root))
        shared = os.path.join(os.path.dirname(os.path.abspath(root)), "shared")
        if os.path.isdir(shared):  # ../shared beside the checkout: the design documents some tests read
            shutil.copytree(shared, os.path.join(tmp, "shared"), symlinks=True)
        yield dest
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
