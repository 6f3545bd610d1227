"""Where a lab's BFD data plane listens for each switch's bfdd, and where it publishes."""

from __future__ import annotations

from pathlib import Path

READY = "ready"  # written, with the pid, once every switch's sockets and listener are open
STATS = "stats.json"  # packets, sessions and CPU, every couple of seconds


def directory(lab_dir: Path) -> Path:
    return lab_dir / "bfd"


# Each switch's bfdd listens for its data plane on a socket in the switch's directory (--dplaneaddr
# unix:<this>) and the data plane connects: FRR 8.4's client mode (bfdd connecting) closes every
# connection it makes (a missing return, fixed in FRR 10.3).
DPLANE_SOCKET = "bfd-dp.sock"


def dplane_option(node_dir: Path) -> str:
    return f"unix:{node_dir / DPLANE_SOCKET}"
