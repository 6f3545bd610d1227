"""Paper against machine: any lab the address plan numbers is checked, planned and exported; `twin
lab up` alone is limited, by what this machine has, and says what would fit."""

import json
from pathlib import Path

from test_cli import twin
from test_model import fabric_of

from twin.lab.capacity import Machine, machines_needed, refusal
from twin.lab.files import open_lab

ROOT = Path(__file__).resolve().parents[2]
SMALL = Machine(cores=2, memory_mib=20_000)


def test_a_shipped_lab_fits_this_kind_of_machine():
    for lab in ("mini", "rail4", "rail8", "pod64", "pod128"):
        assert refusal(fabric_of(lab), SMALL) is None, lab


def test_aipod_fits_one_core_and_at_bfd_100_ms_is_refused_with_the_numbers_and_what_would_fit(tmp_path):
    """BFD's steady packets in the kernel (0.8) and keepalives every 24 s (0.1): 0.9 cores at rest
    (lab/idle.py, model/render.py); BFD every 100 ms triples BFD's share, past two cores."""
    _lab_file, fabric = open_lab("aipod")
    assert (len(fabric.switches), len(fabric.links)) == (368, 10240)
    assert refusal(fabric, Machine(cores=1, memory_mib=20_000)) is None
    faster = tmp_path / "aipod.yaml"
    faster.write_text((ROOT / "labs" / "aipod.yaml").read_text().replace("interval_ms: 300", "interval_ms: 100"))
    error = refusal(open_lab(str(faster))[1], SMALL)
    assert error is not None and "cores at rest" in error.message and "14336 sessions" in error.message
    assert "routing.bfd.interval_ms" in error.hint and "--hosts" in error.hint


def test_a_lab_too_big_for_the_memory_is_split_over_the_machines_it_fits():
    fabric = fabric_of("pod128")
    tight = Machine(cores=64, memory_mib=3000)  # FRR on 208 switches wants about 3.8 GiB
    error = refusal(fabric, tight)
    assert error is not None and "GiB for FRR" in error.message
    count, _busiest, fitting = machines_needed(fabric, tight)
    assert fitting and count == 2 and f"--hosts {count}" in error.hint


def test_aipod_checks_and_plans_on_paper():
    checked = twin("check", "labs/aipod.yaml")
    assert checked.returncode == 0 and "752 nodes, 10240 links" in checked.stdout, checked.stdout + checked.stderr
    planned = twin("plan", "aipod", "--hosts", "8", "--json")
    assert planned.returncode == 0, planned.stderr
    machines = json.loads(planned.stdout)
    assert len(machines) == 8 and sum(m["switches"] for m in machines) == 368
    assert sum(m["hosts"] for m in machines) == 384
