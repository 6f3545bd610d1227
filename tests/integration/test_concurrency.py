"""Several commands on one lab at once (the way operators work): faults injected and cleared
while `twin probe` records its agents, `twin telemetry` samples, `twin dashboard` follows the
lab and a fault agent (flap) runs. Every fault the data plane holds (the ports' physical layer)
must be one the lab state knows, and clearable; nothing is lost; the dashboard shows the faults
the state holds and never a probe loss outside 0-100 %."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

from twin.lab.handle import Lab
from twin.lab.ports import phy

from .helpers import ROOT, lab_running, netns_tier_only, twin_cli

pytestmark = pytest.mark.integration
TWIN = [sys.executable, "-c", "from twin.cli import main; main()"]


def _data_plane_drops(lab: Lab) -> dict[str, int]:
    """'node ifname' -> the share its physical layer drops (ppm), for every port that drops."""
    return {str(port): fault["drop"] for port, fault in phy.faults(lab).items() if fault["drop"]}


def _state_drops(lab: Lab) -> dict[str, int]:
    """The same, as the lab state's silent drops say it should be."""
    return {f"{end['node']} {end['ifname']}": phy.ppm(fault["params"]["loss_pct"])
            for fault in lab.reloaded().state.faults if fault["kind"] == "silent_drop"
            for end in fault["record"]["ports"]}


def _dashboard(url: str) -> dict:
    with urllib.request.urlopen(f"{url.rstrip('/')}/api/state", timeout=10) as response:
        return json.load(response)


def test_concurrent_commands_lose_no_fault(runtime, lab_ref, tmp_path):
    netns_tier_only(runtime, "the lab state's locking and merge do not depend on the runtime")
    with lab_running(lab_ref("mini"), runtime) as lab:
        name = lab.name
        links = sorted(link.name for link in lab.fabric.links if link.kind == "fabric")
        background = [
            subprocess.Popen([*TWIN, "probe", name, "--duration", "20"], cwd=ROOT, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True),
            subprocess.Popen([*TWIN, "telemetry", name, "--duration", "20", "--out", str(tmp_path / "m.jsonl")],
                             cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)]
        board = subprocess.Popen([*TWIN, "dashboard", name, "--port", "0"], cwd=ROOT, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
        line = board.stdout.readline()  # "dashboard of lab NAME: URL  (Ctrl-C to stop)"
        assert "http://" in line, board.stderr.read()
        url = line.split(": ", 1)[1].split()[0]
        seen_loss = []
        flap = twin_cli("fault", "inject", name, "flap", "--link", links[-1], "-p", "period_s=2", "--id", "flapper")
        assert flap.returncode == 0, flap.stderr
        stays = twin_cli("fault", "inject", name, "silent_drop", "--link", links[0], "-p", "loss_pct=2", "--id",
                         "stays")
        assert stays.returncode == 0, stays.stderr
        kept = {"flapper", "stays"}  # these two stay while others come and go
        for i in range(12):
            fault_id = f"drop{i}"
            done = twin_cli("fault", "inject", name, "silent_drop", "--link", links[1 + i % 2], "-p", "loss_pct=1",
                            "--id", fault_id)
            assert done.returncode == 0, done.stderr
            if i < 10:  # the last two stay too
                assert twin_cli("fault", "clear", name, fault_id).returncode == 0
            else:
                kept.add(fault_id)
            seen_loss += [v for _t, v in _dashboard(url)["probe_loss"]]
        for proc in background:
            _out, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, err
        known = {f["id"] for f in lab.reloaded().state.faults}
        assert known == kept
        assert seen_loss and all(0.0 <= v <= 100.0 for v in seen_loss), seen_loss
        deadline = time.monotonic() + 10  # the dashboard reads the faults every second
        while {f["id"] for f in _dashboard(url)["faults"]} != kept and time.monotonic() < deadline:
            time.sleep(0.5)
        assert {f["id"] for f in _dashboard(url)["faults"]} == kept
        board.send_signal(signal.SIGINT)
        _out, err = board.communicate(timeout=30)
        assert board.returncode == 0, err
        # Every port the data plane drops on belongs to a fault the state knows, at its share.
        assert len(_state_drops(lab)) == 6 and _data_plane_drops(lab) == _state_drops(lab)
        cleared = twin_cli("fault", "clear", name, "--all")
        assert cleared.returncode == 0, cleared.stderr
        assert lab.reloaded().state.faults == [] and phy.faults(lab) == {}
