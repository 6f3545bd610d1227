"""`twin lab graph`: a picture of the fabric by tier and rail (matplotlib, PNG or SVG)."""

from __future__ import annotations

from pathlib import Path

from twin.model.fabric import Fabric, Node

TIER_Y = {"superspine": 3, "spine": 2, "leaf": 1, "host": 0}
COLORS = {"superspine": "#6a3d9a", "spine": "#1f78b4", "leaf": "#33a02c", "host": "#ff7f00"}


def _order_key(node: Node) -> tuple:
    if node.role == "leaf":
        return (node.rail or 0, node.group or 0)  # a rail's leaves side by side, under their plane
    if node.role == "spine":
        return (node.rail or 0, node.index)
    return (node.group or 0, node.index)


def positions(fabric: Fabric) -> dict[str, tuple[float, float]]:
    pos = {}
    for role, y in TIER_Y.items():
        row = sorted(fabric.by_role(role), key=_order_key)
        for i, node in enumerate(row):
            pos[node.name] = ((i + 0.5) / max(len(row), 1), float(y))
    return pos


NAMED_COLOR = "#1f77b4"


def draw(fabric: Fabric, out: Path, marked: set[str] | None = None, named: set[str] | None = None) -> Path:
    """`marked`: link names ('a -- b', sorted) and node names drawn in the fault colour;
    `named`: what detectors named, dashed in blue over it (right where both show)."""
    # matplotlib is imported when a picture is drawn: at import it cost every `twin` command 0.45 s.
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    marked, named = marked or set(), named or set()
    pos = positions(fabric)
    width = max(8.0, len(fabric.by_role("leaf")) * 0.9)
    fig, ax = plt.subplots(figsize=(width, 6))
    for link in fabric.links:
        (x1, y1), (x2, y2) = pos[link.a.node], pos[link.b.node]
        hit = " -- ".join(sorted((link.a.node, link.b.node))) in marked
        ax.plot([x1, x2], [y1, y2], color="#d62728" if hit else "#999999", linewidth=2.5 if hit else 0.6,
                zorder=1)
        if " -- ".join(sorted((link.a.node, link.b.node))) in named:
            ax.plot([x1, x2], [y1, y2], color=NAMED_COLOR, linewidth=1.6, linestyle="--", zorder=1.5)
    for node in fabric.nodes.values():
        x, y = pos[node.name]
        hit = node.name in marked
        edge = "#d62728" if hit else NAMED_COLOR if node.name in named else "black"
        ax.scatter([x], [y], s=260, color=COLORS[node.role], zorder=2, edgecolors=edge,
                   linewidths=3 if hit or node.name in named else 0.5)
        ax.annotate(node.name, (x, y), textcoords="offset points", xytext=(0, -16 if y else 12),
                    ha="center", fontsize=6, rotation=0)
    ax.set_title(f"{fabric.name}: {fabric.tiers}-tier, {fabric.rails} rail(s), {len(fabric.links)} links")
    ax.set_axis_off()
    fig.savefig(out, bbox_inches="tight", dpi=150)
    plt.close(fig)
    return out
