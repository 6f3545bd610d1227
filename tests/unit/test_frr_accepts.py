"""FRR itself accepts every config the model renders: each daemon reads its file in check mode
(`-C`, parse and exit, nothing started), on every switch of the shipped small labs, one switch of
each role of the reference-size ones, and labs of random shape drawn as the generated drills draw
them. The golden files (test_golden.py) prove the configs did not change; this proves FRR takes
them. The BFD binding bgpd receives over vtysh once its sessions are up is checked with bgpd's file.

FRR 8.4's check mode exits 0 whatever it read, and says what it refused on stderr: `config_errors`
is the judge, tested on its own below on FRR's words, so a check that runs but reads nothing (the
file unreadable to the daemon's user) fails too."""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import tempfile
from pathlib import Path

import pytest

from twin.lab import runtime
from twin.model.build import build_fabric
from twin.model.render import render_bfd_binding, render_switch
from twin.run.generate import random_shape
from twin.spec.labfile import load_lab

ROOT = Path(__file__).resolve().parents[2]
FRR = Path("/usr/lib/frr")
SHIPPED = sorted((ROOT / "labs").glob("*.yaml"))
GENERATED_SEEDS = range(6)
EVERY_SWITCH_UP_TO = 40  # a bigger lab's switches: one of each role (pod64's 104 took a minute)
# What FRR writes when it cannot read or does not accept a config line (lib/vty.c, lib/command.c).
REFUSED = re.compile(r"config line|configuration file|Unknown command|Ambiguous command|Incomplete command|"
                     r"[Ee]rror", re.IGNORECASE)
HARMLESS = re.compile(r"Disabling MPLS support")  # zebra on a kernel without MPLS: not about the file

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not (FRR / "bgpd").is_file(),
                                reason="runs FRR's daemons in check mode (root: they switch to the frr user)")


def config_errors(stderr: str) -> list[str]:
    """The lines of a daemon's check-mode output that refuse something in its file."""
    return [line for line in stderr.splitlines() if REFUSED.search(line) and not HARMLESS.search(line)]


def check(daemon: str, text: str) -> list[str]:
    """Run `daemon -C` on `text` in a folder of its own (readable by the frr user); its refusals."""
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        folder.chmod(0o755)
        config = folder / f"{daemon}.conf"
        config.write_text(text)
        config.chmod(0o644)
        result = subprocess.run([str(FRR / daemon), "-C", "-f", str(config), "--vty_socket", scratch,
                                 "-i", str(folder / f"{daemon}.pid"), "-z", str(folder / "zserv.api")],
                                capture_output=True, text=True, timeout=30)
    return config_errors(result.stderr) + ([f"exit {result.returncode}"] if result.returncode else [])


def configs(fabric, node) -> dict[str, str]:
    """The daemons' files of one switch, bgpd's with the BFD binding after it (vtysh's
    `configure terminal` is the file's own mode)."""
    files = dict(render_switch(fabric, node))
    binding = [line for line in render_bfd_binding(node) if line.strip() != "configure terminal"]
    if binding:
        files["bgpd"] = files["bgpd"].rstrip("\n") + "\n" + "\n".join(binding) + "\n"
    return files


def chosen_switches(fabric, every: bool) -> list:
    switches = sorted(fabric.switches, key=lambda n: n.name)
    if every:
        return switches
    by_role = {}
    for node in switches:
        by_role.setdefault(node.role, node)
    return list(by_role.values())


def refusals(fabric, every: bool) -> list[str]:
    return [f"{node.name}/{daemon}.conf: {error}" for node in chosen_switches(fabric, every)
            for daemon, text in configs(fabric, node).items() for error in check(daemon, text)]


@pytest.mark.parametrize("lab_path", SHIPPED, ids=[p.stem for p in SHIPPED])
def test_frr_accepts_every_shipped_lab(lab_path):
    fabric = build_fabric(load_lab(lab_path, runtime.names()))
    assert not refusals(fabric, every=len(fabric.switches) <= EVERY_SWITCH_UP_TO)


@pytest.mark.parametrize("seed", GENERATED_SEEDS)
def test_frr_accepts_labs_of_random_shape(seed, tmp_path):
    rng = random.Random(seed)
    document = {"name": f"frr-{seed}", "fabric": random_shape(rng),
                "links": {"rate": "100mbit", "mtu": rng.choice([1500, 9000]), "pfc": rng.choice([True, False])},
                "routing": {"bfd": {"interval_ms": rng.choice([100, 300]), "multiplier": rng.choice([3, 5])},
                            "ecmp_hash": rng.choice(["l3", "l4"]), "asn_plan": rng.choice(["auto", "4-byte"])}}
    path = tmp_path / f"frr-{seed}.yaml"
    path.write_text(json.dumps(document))  # JSON is YAML
    fabric = build_fabric(load_lab(path, runtime.names()))
    assert not refusals(fabric, every=True), document


def test_a_refused_line_is_caught():
    """The check can fail: a command bgpd does not know, and a file its user cannot read."""
    fabric = build_fabric(load_lab(ROOT / "labs" / "mini.yaml", runtime.names()))
    text = configs(fabric, sorted(fabric.switches, key=lambda n: n.name)[0])["bgpd"]
    planted = text.replace("\n!", "\n no-such-command 42\n!", 1)
    assert any("no-such-command" in error for error in check("bgpd", planted))
    assert config_errors("BGP: [VDWX6-W8CNF][EC 100663304] vty_read_config: can't open configuration file [/x]")
    assert not config_errors("ZEBRA: [NNACN-54BDA][EC 4043309110] Disabling MPLS support (no kernel support)")
