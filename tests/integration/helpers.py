"""Helpers for tests that build real labs."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from twin.lab import deploy
from twin.lab.files import open_lab
from twin.lab.kernel.offload import snmp
from twin.lab.pfc import published
from twin.lab.ports.counters import CounterReader
from twin.lab.runtime.docker import labelled_containers
from twin.lab.runtime.netns import NETNS_DIR, namespace_prefix
from twin.lab.state import lab_dir
from twin.telemetry.fabric import softnet_drops

ROOT = Path(__file__).resolve().parents[2]
# The docker tier's copies of the shipped labs and its own labs: d-mini, d-rail4, d-runkill.
DOCKER_LAB_PREFIX = "d-"


def leftovers(lab: str) -> list[str]:
    """Everything of `lab` still on the machine: namespaces, processes, files, containers."""
    found = []
    prefix = namespace_prefix(lab)
    if os.path.isdir(NETNS_DIR):
        found += [f"netns {n}" for n in os.listdir(NETNS_DIR) if n.startswith(prefix)]
    directory = str(lab_dir(lab)).encode()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmd = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            # The lab directory as an argument, or a path inside it (a controller takes the directory).
            if any(arg == directory or arg.startswith(directory + b"/") for arg in cmd.split(b"\0")):
                found.append(f"process {entry} {cmd[:80]!r}")
    if lab_dir(lab).exists():
        found.append(f"directory {lab_dir(lab)}")
    found += [f"container {c.name}" for c in labelled_containers(lab)]
    return found


@contextmanager
def lab_running(ref: str, runtime: str | None = None):
    """Bring a lab up (on `runtime`, else the lab file's); tear it down afterwards whatever
    happens, and check nothing is left. Yields the running `Lab`."""
    lab_file, fabric = open_lab(ref)
    fabric = fabric.with_runtime(runtime)
    try:
        with deploy.running(lab_file, fabric, timeout_s=90) as lab:
            yield lab
    finally:
        assert leftovers(fabric.name) == [], f"teardown left: {leftovers(fabric.name)}"


def twin_argv(*args: str) -> list[str]:
    """argv of `twin ARGS` with this interpreter (the tests' checkout, not an installed twin)."""
    return [sys.executable, "-c", "from twin.cli import main; main()", *args]


def twin_cli(*args, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(twin_argv(*args), capture_output=True, text=True, cwd=ROOT, **kwargs)


def lab_name(ref: str) -> str:
    """The name of the lab a name or a lab file's path refers to."""
    return open_lab(ref)[1].name


def scenario_on(tmp_path: Path, scenario: str, lab_ref: str) -> Path:
    """A copy of a shipped scenario that runs on another lab (a name or a lab file's path)."""
    lines = (ROOT / "scenarios" / f"{scenario}.yaml").read_text().splitlines(keepends=True)
    path = tmp_path / f"{scenario}.yaml"
    path.write_text("".join(f"lab: {lab_ref}\n" if line.startswith("lab:") else line for line in lines))
    return path


def lab_copy(tmp_path: Path, source: str, name: str) -> Path:
    """A copy of a shipped lab under another name (labs with different names run side by side)."""
    text = (ROOT / "labs" / f"{source}.yaml").read_text().replace(f"name: {source}", f"name: {name}")
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    return path


@contextmanager
def marking(lab, kmin: int = 0, kmax: int | None = None, pmax: float | None = None):
    """Every switch queue's ECN marking changed for a block (kmin 0: off, the lab on PFC alone),
    through the controller, as a fault would change it; the lab's own settings come back after."""
    from twin.lab.pfc import client as pfc_client
    from twin.model.ports import ports

    settings = {"kmin": kmin, **({"kmax": kmax} if kmax is not None else {}),
                **({"pmax": pmax} if pmax is not None else {})}
    for port in [p for p in ports(lab.fabric) if lab.fabric.nodes[p.node].is_switch]:
        pfc_client.tune(lab.paths.root, "test-marking", port, **settings)
    try:
        yield
    finally:
        pfc_client.release(lab.paths.root, "test-marking")


def netns_tier_only(runtime: str, why: str) -> None:
    """Skip on the docker tier a test of what does not depend on the runtime: `why` says so. The
    docker tier runs on one of CI's two workers, beside the netns tier; it keeps what containers
    change (exec, processes and sockets in them, their teardown)."""
    if runtime != "netns":
        pytest.skip(f"{why} (netns tier only)")


def losses_elsewhere(lab, hosts: list[str], since: dict | None = None) -> dict[str, int]:
    """Where else than a fault the kernel counts a lost packet: the lab's queues and ports, the
    machine's per-CPU backlog and unresolved-neighbour queue (both machine-wide), and the sockets
    of `hosts`; less `since` (an earlier reading) when given. For a test's failure message."""
    with CounterReader(lab) as reader:
        interfaces = reader.read(checksums=False).interfaces.values()
    with open("/proc/net/stat/arp_cache") as handle:
        header, values = (line.split() for line in handle.read().splitlines()[:2])
    udp = [snmp(lab.netns(host)) for host in hosts]
    counts = {"queue_drops": sum(v.get("qdisc_drops", 0) for v in interfaces),
              "port_drops": sum(v.get("rx_dropped", 0) + v.get("tx_dropped", 0) for v in interfaces),
              "kernel_backlog": softnet_drops(),
              "arp_unresolved": int(values[header.index("unresolved_discards")], 16),
              "udp_rcvbuf": sum(c.get("Udp.RcvbufErrors", 0) for c in udp),
              "udp_in_errors": sum(c.get("Udp.InErrors", 0) for c in udp)}
    return {key: value - (since or {}).get(key, 0) for key, value in counts.items()}


def pfc_standing(lab) -> dict:
    """What the PFC controller last published of the ports it holds now, how old that is, and the
    errors it reported: for a test's failure message."""
    document = published.read(lab.state.directory)
    if not document:
        return {"published": None}
    return {"held_s": {" ".join(port): held for port, held in published.paused_for(document).items()},
            "age_s": round(time.monotonic() - document["t_mono"], 3),
            "controller": document.get("controller", {})}


def wait_for(predicate, timeout_s=15.0, what="condition", detail=None):
    """Poll `predicate` until it holds; on time-out, fail saying what was awaited and, from
    `detail()`, what stood in its way."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    pytest.fail(f"timed out waiting for {what}" + (f": {detail()}" if detail else ""))
