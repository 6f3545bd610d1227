"""Golden files: the generated topology and every rendered FRR config of each shipped lab.

After an intended change, rewrite them with `make golden` and review the diff.
"""

import os
from pathlib import Path

import pytest

from twin.lab import runtime
from twin.model.build import build_fabric
from twin.model.describe import describe
from twin.model.render import render_bfd_binding, render_switch
from twin.spec.labfile import load_lab

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden"
# The reference-size labs (pod64, pod128, aipod) are left out: their files would be megabytes of the
# same templates; test_model checks their counts, wiring and ASNs.
REFERENCE_SIZE = ("pod64", "pod128", "aipod")
LAB_FILES = [p for p in sorted((ROOT / "labs").glob("*.yaml")) if p.stem not in REFERENCE_SIZE]


def rendered(lab_path: Path) -> str:
    fabric = build_fabric(load_lab(lab_path, runtime.names()))
    parts = [describe(fabric)]
    for node in sorted(fabric.switches, key=lambda n: n.name):
        for daemon, text in render_switch(fabric, node).items():
            parts.append(f"===== {node.name}/{daemon}.conf\n{text}")
        parts.append(f"===== {node.name}/bgpd-bfd.vtysh (applied once BGP is up)\n"
                     + "\n".join(render_bfd_binding(node)) + "\n")
    return "\n".join(parts)


@pytest.mark.parametrize("lab_path", LAB_FILES, ids=[p.stem for p in LAB_FILES])
def test_golden(lab_path):
    golden = GOLDEN / f"{lab_path.stem}.txt"
    text = rendered(lab_path)
    if os.environ.get("UPDATE_GOLDEN"):
        golden.write_text(text)
    assert golden.is_file(), f"no golden file for {lab_path.name}: run `make golden`"
    assert text == golden.read_text(), f"{lab_path.name} differs from {golden}: review, then `make golden`"
