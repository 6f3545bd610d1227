"""Checks before anything is created: privileges, tools, kernel features the lab asks for."""

from __future__ import annotations

import os
import shutil
import subprocess

from twin.errors import LabFileError, MissingDependencyError, PrivilegeError, Problem
from twin.lab.routing import lldp
from twin.lab.routing.frr import check_installed
from twin.spec.labfile import LabFile

QDISC_PROBE_ARGS = {"netem": "delay 1ms", "htb": "default 10"}



def kernel_has_qdisc(kind: str) -> bool:
    """Try the qdisc on a veth in an anonymous namespace that dies with the probe."""
    probe = (f"ip link add probe0 type veth peer name probe1 && tc qdisc add dev probe0 root {kind} "
             + QDISC_PROBE_ARGS.get(kind, ""))
    done = subprocess.run(["unshare", "--net", "sh", "-c", probe], capture_output=True)
    return done.returncode == 0


def check(lab: LabFile) -> None:
    if os.geteuid() != 0:
        raise PrivilegeError("building a lab needs root (network namespaces, veth, tc, FRR)",
                             hint="run as root, e.g. `sudo twin lab up ...`")
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            raise MissingDependencyError(f"{tool} is not installed", hint="run `make deps` (iproute2)")
    check_installed()
    if lab.spec.lldp:
        lldp.check_installed()
    if not kernel_has_qdisc("htb"):
        raise MissingDependencyError("the kernel has no HTB qdisc, needed to shape links",
                                     hint="enable CONFIG_NET_SCH_HTB")
    if lab.spec.links.delay and not kernel_has_qdisc("netem"):
        raise LabFileError([Problem(str(lab.path), lab.line("links", "delay"), "links.delay",
                                    "link delay needs the netem qdisc, which this kernel does not have",
                                    "remove links.delay, or run on a kernel with sch_netem")])
