"""The FRR daemons a switch runs, each described once: its name (its binary, its config
`<name>.conf`, its vty socket `<name>.vty`), when it starts, the socket whose existence says it
listens, its control socket if it has one, and the show commands it answers. Bring-up, restart,
teardown, the vty shortcut and the containerlab export all read them from here (lab/routing/frr.py,
model/export.py, model/render.py).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FrrDaemon:
    name: str
    # Daemons of one group start together, once every daemon of the group before listens: a daemon
    # whose first connect to zebra fails retries only after 10 s (FRR's zclient), delaying BFD and BGP.
    start_group: int
    ready_socket: str  # made in the node's directory once the daemon listens
    answers: tuple[str, ...] = ()  # show commands it answers itself (vtysh would route them to it)
    control_socket: str | None = None  # bfdd's data-plane/control socket (--bfdctl)

    @property
    def config(self) -> str:
        return f"{self.name}.conf"

    @property
    def vty_socket(self) -> str:
        return f"{self.name}.vty"

    def sockets(self) -> set[str]:
        """The sockets it leaves behind in the node's directory when it is killed."""
        return {self.ready_socket, *([self.control_socket] if self.control_socket else [])}


ZSERV_SOCKET = "zserv.api"  # zebra's API socket, which every daemon is told (-z)
BFDD = "bfdd"
BFDD_SOCKET = "bfdd.sock"  # bfdd's control socket (--bfdctl), made once it listens
# No staticd: no fault or mitigation adds static routes (black holes are nftables rules), and a
# daemon per switch that serves nothing cost 208 processes and their memory at pod128.
DAEMONS = (
    FrrDaemon("zebra", 0, ZSERV_SOCKET, answers=("show ip route",)),
    FrrDaemon(BFDD, 1, BFDD_SOCKET, answers=("show bfd",), control_socket=BFDD_SOCKET),
    FrrDaemon("bgpd", 1, "bgpd.vty", answers=("show bgp", "show ip bgp")),
)


def start_groups() -> list[tuple[FrrDaemon, ...]]:
    """The daemons in the order they start, a group at a time (zebra first)."""
    groups = sorted({d.start_group for d in DAEMONS})
    return [tuple(d for d in DAEMONS if d.start_group == group) for group in groups]


def answering(command: str) -> FrrDaemon | None:
    """The daemon that answers a show command itself, for the commands the twin uses."""
    return next((d for d in DAEMONS if any(command.startswith(prefix) for prefix in d.answers)), None)
