"""Draw docs/architecture.png: the packages of twin/ as layers, with the imports between them,
read from the source by the same code as tests/unit/test_layers.py (so the picture cannot drift
from the rule the test enforces). Also prints the number of modules per package and writes them
into docs/architecture.md's layer table (tests/unit/test_layers.py fails when that is stale).

    .venv/bin/python tools/architecture.py --out docs/architecture.png
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import networkx as nx  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.unit.test_layers import ALLOWED, CORE, DOC, _graph, _layer, _modules, with_module_counts  # noqa: E402


def package_graph() -> tuple[nx.DiGraph, Counter]:
    """Packages as nodes, an edge where any module of one imports any module of the other."""
    modules = _modules()
    counts = Counter(_layer(m, modules) for m in modules if m != "twin")
    packages = nx.DiGraph()
    packages.add_nodes_from(counts)
    for source, target in _graph().edges:
        a, b = _layer(source, modules), _layer(target, modules)
        if a != b and b != CORE and a != "twin":
            packages.add_edge(a, b)
    return packages, counts


def _levels(packages: nx.DiGraph) -> dict[str, int]:
    """Height of each package above the core: 0 for what imports nothing of ours."""
    level = {}
    for name in reversed(list(nx.topological_sort(packages))):
        level[name] = 1 + max((level[t] for t in packages.successors(name)), default=-1)
    return level


def draw(packages: nx.DiGraph, counts: Counter, out: Path) -> None:
    level = _levels(packages)
    rows: dict[int, list[str]] = {}
    for name in sorted(packages, key=lambda n: (level[n], n)):
        rows.setdefault(level[name], []).append(name)
    rows = {lvl + 1: names for lvl, names in rows.items()}
    rows[0] = [CORE]  # every package may use the core modules; drawn below, without edges
    pos = {name: ((i + 0.5) / len(names) * 10, lvl * 1.3) for lvl, names in rows.items()
           for i, name in enumerate(names)}
    # Only the imports not implied by others (transitive reduction): the layering, readable.
    direct = nx.transitive_reduction(packages.subgraph([n for n in packages if n != CORE]))
    fig, ax = plt.subplots(figsize=(11, 1.3 * len(rows) + 1))
    nx.draw_networkx_edges(direct, pos, ax=ax, edge_color="#999999", arrowsize=10, width=0.8,
                           connectionstyle="arc3,rad=0.08", node_size=2600)
    labels = {n: f"{n}\n{counts[n]} modules" for n in pos}
    nx.draw_networkx_nodes(packages.subgraph([n for n in pos if n != CORE]), pos, ax=ax, node_size=2600,
                           node_color="#dce9f5", edgecolors="#3b6ea5")
    ax.scatter(*pos[CORE], s=6000, marker="s", color="#eeeeee", edgecolors="#777777")
    nx.draw_networkx_labels(direct, pos, ax=ax, labels={n: labels[n] for n in direct}, font_size=8)
    ax.text(*pos[CORE], f"core: twin/*.py\n{counts[CORE]} modules", ha="center", va="center", fontsize=8)
    ax.set_title("fabric-twin: packages by layer (arrow: imports; implied imports not drawn)")
    ax.axis("off")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "architecture.png")
    args = parser.parse_args()
    packages, counts = package_graph()
    assert set(packages) - {CORE} <= set(ALLOWED), "a package has no layer: see tests/unit/test_layers.py"
    draw(packages, counts, args.out)
    DOC.write_text(with_module_counts(DOC.read_text(), counts))
    for name in sorted(counts, key=lambda n: (-counts[n], n)):
        print(f"{name:12} {counts[name]:3} modules")
    print(f"{'total':12} {sum(counts.values()):3} modules; package imports: {packages.number_of_edges()}; "
          f"cycles: {len(list(nx.simple_cycles(_graph())))}")
    print(f"wrote {args.out} and the module counts in {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
