"""The layout contract of docs/design.md: no import circle between any two modules, the layer and
library contracts of ``[tool.importlinter]`` in pyproject.toml, and folders small enough to read."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

from tests.support.paths import REPO

PACKAGES = ("app", "ui", "recordings", "engine")
MAX_MODULES_PER_FOLDER = 20


def _cycles(graph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    adj = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(adj):
        if root in index:
            continue
        work = [(root, iter(adj[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(adj[w])))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        found.append(sorted(comp))
    return found


def test_no_module_imports_itself_through_others():
    graph = grimp.build_graph(*PACKAGES, exclude_type_checking_imports=True)
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_circle():
    """The check above can fail: a graph with a -> b -> c -> a has one circle."""
    graph = grimp.ImportGraph()
    for a, b in (("p.a", "p.b"), ("p.b", "p.c"), ("p.c", "p.a"), ("p.c", "p.d")):
        graph.add_import(importer=a, imported=b)
    assert _cycles(graph) == [["p.a", "p.b", "p.c"]]


def test_import_contracts_hold():
    """``lint-imports`` (import-linter) on the contracts in pyproject.toml, over this checkout."""
    exe = Path(sys.executable).parent / "lint-imports"
    assert exe.exists(), "lint-imports is not installed: install the test extras (pip install -e '.[test]')"
    done = subprocess.run([str(exe), "--no-cache"], cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]


@pytest.mark.parametrize("package", PACKAGES)
def test_folders_hold_few_modules(package):
    for folder in [REPO / package, *(p for p in (REPO / package).rglob("*") if p.is_dir())]:
        if "__pycache__" in folder.parts:
            continue
        modules = [p for p in folder.glob("*.py") if p.name != "__init__.py"]
        assert len(modules) <= MAX_MODULES_PER_FOLDER, (folder, len(modules))
