"""A shipped lab written under another name, optionally at another line rate or with other link
settings: what the benchmarks bring up beside (or instead of) the shipped one."""

from __future__ import annotations

from pathlib import Path

from ruamel.yaml import YAML

ROOT = Path(__file__).resolve().parents[1]


def lab_copy(name: str, new_name: str, folder: Path, rate: str | None = None, links: dict | None = None,
             routing: dict | None = None, fabric: dict | None = None) -> Path:
    """labs/<name>.yaml as `new_name` in `folder`, its links at `rate` and with `links`, `routing` and
    `fabric` set."""
    yaml = YAML()
    doc = yaml.load((ROOT / "labs" / f"{name}.yaml").read_text())
    doc["name"] = new_name
    if rate:
        doc["links"]["rate"] = rate
    doc["links"].update(links or {})
    if routing:
        doc.setdefault("routing", {}).update(routing)
    doc["fabric"].update(fabric or {})
    path = folder / f"{new_name}.yaml"
    with open(path, "w") as handle:
        yaml.dump(doc, handle)
    return path
