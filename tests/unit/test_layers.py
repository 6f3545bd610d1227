"""The architecture stays true: which package may import which (docs/architecture.md), no import
cycle between modules, and only the core modules at the top of twin/. Read from the source with
`ast`, so an import inside a function counts like one at the top."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import networkx as nx

TWIN = Path(__file__).resolve().parents[2] / "twin"
CORE = "core"  # the modules at the top of twin/: errors, units, events, ...

# Lowest layer first. A package may import the core, the packages listed for it, and itself.
ALLOWED = {
    CORE: set(),
    "spec": set(),
    "model": {"spec"},
    "lab": {"spec", "model"},
    "roce": set(),
    "faults": {"model", "lab"},
    "collectives": {"model", "lab", "roce"},
    "probes": {"model", "lab"},
    "telemetry": {"model", "lab"},
    "detect": {"model", "lab", "roce", "probes", "telemetry", "collectives"},
    "mitigate": {"model", "lab", "detect", "probes"},
    "workloads": {"model", "lab", "roce", "collectives", "probes", "detect", "mitigate"},
    "results": {"spec", "model", "lab", "roce", "probes", "telemetry", "detect", "workloads"},
    "run": {"spec", "model", "lab", "faults", "collectives", "probes", "telemetry", "detect", "mitigate",
            "workloads", "results"},
    "train": {"spec", "model", "lab", "faults", "probes", "detect", "workloads", "run"},
    "dashboard": {"model", "lab", "collectives", "probes", "telemetry"},
    "cli": {"spec", "model", "lab", "roce", "faults", "collectives", "probes", "telemetry", "detect",
            "mitigate", "workloads", "results", "run", "train", "dashboard"},
}
MAX_TOP_MODULES = 12


def _module(path: Path, root: Path = TWIN) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules(root: Path = TWIN) -> dict[str, Path]:
    return {_module(p, root): p for p in root.rglob("*.py")}


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The twin modules `name` imports (a `from x import y` of a submodule counts as y)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([node.module] if node.module else []))
            if base.split(".")[0] != "twin":
                continue
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "twin"}
    return found - {"twin", name}


def _layer(module: str, modules: dict[str, Path]) -> str:
    parts = module.split(".")
    if len(parts) == 2 and modules[module].name != "__init__.py":
        return CORE
    return parts[1] if len(parts) > 1 else CORE


def _graph(root: Path = TWIN) -> nx.DiGraph:
    modules = _modules(root)
    graph = nx.DiGraph()
    for name, path in modules.items():
        graph.add_node(name)
        for target in _imports(name, path, set(modules)):
            graph.add_edge(name, target)
    return graph


def test_every_package_has_a_layer():
    modules = _modules()
    assert {_layer(m, modules) for m in modules} - {"twin"} <= set(ALLOWED), \
        "a new package needs its place in ALLOWED and in docs/architecture.md"


def _upward(root: Path = TWIN) -> list[str]:
    """Every import of a package the layers do not allow it."""
    modules = _modules(root)
    wrong = []
    for source, target in _graph(root).edges:
        a, b = _layer(source, modules), _layer(target, modules)
        if a != b and b != CORE and b not in ALLOWED[a]:
            wrong.append(f"{source} -> {target} ({a} may not import {b})")
    return sorted(wrong)


def test_no_import_points_up_or_sideways():
    wrong = _upward()
    assert not wrong, "\n".join(wrong)


def test_no_import_cycle():
    cycles = list(nx.simple_cycles(_graph()))
    assert not cycles, "\n".join(" -> ".join(c + c[:1]) for c in cycles[:10])


def test_few_modules_at_the_top():
    top = sorted(p.stem for p in TWIN.glob("*.py") if p.name != "__init__.py")
    assert len(top) <= MAX_TOP_MODULES, top


def test_the_checks_see_a_violation(tmp_path):
    """The graph is read right: a known edge is there (a test that could not fail proves nothing)."""
    graph = _graph()
    assert graph.has_edge("twin.lab.deploy", "twin.lab.state")
    assert graph.has_edge("twin.run.runner", "twin.lab.deploy")


def test_a_planted_violation_is_caught(tmp_path):
    """A tree with one upward import (the model importing the run engine, in a function, as a
    relative import) and the cycle it closes: both checks name exactly them."""
    root = tmp_path / "twin"
    for package in ("model", "run"):
        (root / package).mkdir(parents=True)
        (root / package / "__init__.py").write_text("")
    (root / "__init__.py").write_text("")
    (root / "errors.py").write_text("")
    (root / "model" / "build.py").write_text("from twin import errors\n\n\ndef build():\n"
                                             "    from ..run import engine\n    return engine\n")
    (root / "run" / "engine.py").write_text("from twin.model import build\n")
    assert _upward(root) == ["twin.model.build -> twin.run.engine (model may not import run)"]
    assert [sorted(c) for c in nx.simple_cycles(_graph(root))] == [["twin.model.build", "twin.run.engine"]]


DOC = TWIN.parent / "docs" / "architecture.md"
_ROW = re.compile(r"^\| (?P<names>[^|]+) \|(?P<concern>.*)\| (?P<counts>[0-9, ]+) \|$", re.M)


def _row_packages(names: str) -> list[str]:
    return [CORE] if names.startswith("core") else re.findall(r"`(\w+)/`", names)


def with_module_counts(text: str, counts: Counter) -> str:
    """docs/architecture.md's layer table with each row's modules counted from the source
    (`make architecture` writes it; the test below fails when it is stale)."""
    def row(match: re.Match) -> str:
        figures = ", ".join(str(counts[p]) for p in _row_packages(match["names"]))
        return f"| {match['names']} |{match['concern']}| {figures} |"
    return _ROW.sub(row, text)


def module_counts(root: Path = TWIN) -> Counter:
    modules = _modules(root)
    return Counter(_layer(m, modules) for m in modules if m != "twin")


def test_the_layer_table_counts_the_modules_there_are():
    text = DOC.read_text()
    rows = [_row_packages(m["names"]) for m in _ROW.finditer(text)]
    assert sorted(p for r in rows for p in r) == sorted(set(ALLOWED)), "every layer has its row"
    assert with_module_counts(text, module_counts()) == text, "stale: run `make architecture`"


# lab/'s rooms, lowest first (twin/lab/__init__.py): a room, or a module at lab/'s top, with its rank.
LAB_ROOMS = {
    "state": 0, "kernel": 0, "publisher": 0,
    "runtime": 1,
    "files": 2, "handle": 2, "nft": 2, "identity": 2, "reach": 2, "traffic": 2,
    "ebpf": 3, "pfc": 4, "bfd": 4, "awake": 4,
    "ports": 5,
    "routing": 6,
    "deploy": 7, "status": 7, "capacity": 7, "idle": 7, "neigh": 7, "kernel_state": 7,
}


def _lab_downward(root: Path = TWIN) -> list[str]:
    """Every import inside lab/ of a room ranked after the importer's, and every import kernel/
    makes of the rest of lab/ (it knows no lab, not even its state)."""
    wrong = []
    for source, target in _graph(root).edges:
        if not (source.startswith("twin.lab.") and target.startswith("twin.lab.")):
            continue
        a, b = source.split(".")[2], target.split(".")[2]
        if a not in LAB_ROOMS or b not in LAB_ROOMS:
            wrong.append(f"{source} -> {target} (a room of lab/ without its place in LAB_ROOMS)")
        elif LAB_ROOMS[b] > LAB_ROOMS[a] or (a == "kernel" and b != "kernel"):
            wrong.append(f"{source} -> {target} ({a} comes before {b} in lab/)")
    return sorted(wrong)


def test_lab_rooms_import_only_rooms_before_them():
    wrong = _lab_downward()
    assert not wrong, "\n".join(wrong)


def test_a_planted_room_violation_is_caught(tmp_path):
    """The kernel plumbing asking the lab's state, and the state importing routing: both named."""
    root = tmp_path / "twin"
    for package in ("lab", "lab/kernel", "lab/routing"):
        (root / package).mkdir(parents=True)
        (root / package / "__init__.py").write_text("")
    (root / "__init__.py").write_text("")
    (root / "lab" / "state.py").write_text("def load():\n    from twin.lab.routing import frr\n    return frr\n")
    (root / "lab" / "kernel" / "nsutil.py").write_text("from twin.lab import state\n")
    (root / "lab" / "routing" / "frr.py").write_text("from twin.lab.kernel import nsutil\n")
    assert _lab_downward(root) == ["twin.lab.kernel.nsutil -> twin.lab.state (kernel comes before state in lab/)",
                                   "twin.lab.state -> twin.lab.routing.frr (state comes before routing in lab/)"]


def test_the_pure_planners_load_no_kernel_or_container_library():
    """Planning probes or pairs needs the model only: importing it must not pull in the Docker
    SDK or pyroute2 (lab/), which a machine without them could not load."""
    code = ("import sys, twin.probes.selection, twin.model.nics; "
            "print(sorted(m for m in ('docker', 'pyroute2', 'twin.lab') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=TWIN.parent, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "[]", (done.stdout, done.stderr)
