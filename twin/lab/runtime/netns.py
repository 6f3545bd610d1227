"""The embedded runtime: one network namespace per node, veth pairs between them (pyroute2)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

from pyroute2 import NetlinkError
from pyroute2 import netns as pr_netns

from twin.errors import RuntimeBackendError
from twin.lab.kernel.nsutil import create_netns, netlink_in, pids_in_netns
from twin.lab.runtime.base import ExecResult
from twin.model.fabric import Link, Node
from twin.names import is_lab_name, lab_name
from twin.procs import terminate

NETNS_DIR = "/run/netns"
PREFIX = "ftw-"


def namespace_prefix(lab: str) -> str:
    # '.' cannot appear in a lab name, so lab 'rail' never matches lab 'rail-4'.
    return f"{PREFIX}{lab}."


class NetnsRuntime:
    kind = "netns"

    def __init__(self, lab: str):
        self.lab = lab_name(lab)  # prefixes every namespace this runtime creates, lists and deletes
        self.prefix = namespace_prefix(lab)

    def resource_name(self, node: str) -> str:
        return self.prefix + node

    def netns_path(self, node: str) -> str:
        return f"{NETNS_DIR}/{self.resource_name(node)}"

    def preflight(self, nodes: list[Node]) -> None:
        pass  # namespaces need nothing the general preflight does not check

    def create_node(self, node: Node) -> None:
        name = self.resource_name(node.name)
        if os.path.exists(self.netns_path(node.name)):
            raise RuntimeBackendError(f"network namespace {name} already exists",
                                      hint=f"another run of lab '{self.lab}' left it: twin lab down {self.lab}")
        try:
            create_netns(self.netns_path(node.name))
        except OSError as exc:
            raise RuntimeBackendError(f"cannot create network namespace {name}: {exc}") from exc

    def delete_node(self, name: str) -> None:
        path = self.netns_path(name)
        if not os.path.exists(path):
            return
        terminate(pids_in_netns(path))
        try:
            pr_netns.remove(self.resource_name(name))
        except FileNotFoundError:
            pass

    def create_link(self, link: Link) -> None:
        self.create_links([link])

    def create_links(self, links: list[Link], done: Callable[[], None] = lambda: None) -> None:
        """Create each veth pair directly between its two namespaces: nothing ever sits in the root
        one. One netlink socket per namespace the pairs start from."""
        by_node: dict[str, list[Link]] = {}
        for link in links:
            by_node.setdefault(link.a.node, []).append(link)
        for node, node_links in by_node.items():
            with netlink_in(self.netns_path(node)) as ipr:
                for link in node_links:
                    try:
                        ipr.link("add", ifname=link.a.ifname, kind="veth",
                                 peer={"ifname": link.b.ifname, "net_ns_fd": self.netns_path(link.b.node)})
                    except NetlinkError as exc:
                        raise RuntimeBackendError(f"cannot create veth for {link.name}: {exc}") from exc
                    done()

    def exec(self, node: str, argv: list[str], timeout: float | None = 30,
             capture: bool = True, input: str | None = None) -> ExecResult:
        if not os.path.exists(self.netns_path(node)):
            raise RuntimeBackendError(f"node {node} of lab {self.lab} is not running")
        command = ["ip", "netns", "exec", self.resource_name(node), *argv]
        try:
            done = subprocess.run(command, capture_output=capture, text=True, timeout=timeout, input=input)
        except subprocess.TimeoutExpired as exc:
            raise RuntimeBackendError(f"{' '.join(argv)} on {node} timed out after {timeout} s") from exc
        except FileNotFoundError as exc:
            raise RuntimeBackendError(f"cannot run {argv[0]}: {exc}") from exc
        return ExecResult(done.returncode, done.stdout or "", done.stderr or "")

    def spawn(self, node: str, argv: list[str], log: Path, env: dict[str, str] | None = None) -> int:
        with open(log, "ab") as out:
            proc = subprocess.Popen(["ip", "netns", "exec", self.resource_name(node), *argv],
                                    stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                    start_new_session=True, env=env)
        return proc.pid

    def owned(self) -> list[str]:
        try:
            names = os.listdir(NETNS_DIR)
        except FileNotFoundError:
            return []
        return sorted(n[len(self.prefix):] for n in names if n.startswith(self.prefix))


def orphan_labs() -> set[str]:
    """Names of labs that still have namespaces here (with or without a state file)."""
    try:
        names = os.listdir(NETNS_DIR)
    except FileNotFoundError:
        return set()
    found = {n[len(PREFIX):].split(".", 1)[0] for n in names if n.startswith(PREFIX) and "." in n}
    return {lab for lab in found if is_lab_name(lab)}  # another tool's `ftw-..x` is not a lab of ours
