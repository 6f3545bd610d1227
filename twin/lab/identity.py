"""Who a rank runs as. gloo binds only its listening socket to the NIC (GLOO_SOCKET_IFNAME);
its outgoing connections take their source address from routing. Ranks of rail r run as uid
RANK_UID_BASE + r, and each host has a `uidrange` rule sending that uid's traffic through
NIC r's table, so a rank's connections leave through its own rail whichever rail the peer is on.
Ranks also stop being root, which they never needed."""

from __future__ import annotations

import os

from twin.model.host_routing import RANK_UID_BASE, rank_uid

RANK_GID = RANK_UID_BASE


def become_rank(rail: int, home: str) -> None:
    os.umask(0o007)  # ranks of different rails (uids) share the store file through the group
    os.setgroups([])
    os.setgid(RANK_GID)
    os.setuid(rank_uid(rail))
    os.environ["HOME"] = home


def share_with_ranks(directory, files: tuple[str, ...] = ()) -> None:
    """Let ranks (group RANK_GID) create files in `directory`, and share `files` read-write
    (torch's FileStore creates its file 0644, which ranks of other rails could not open)."""
    os.chown(directory, 0, RANK_GID)
    os.chmod(directory, 0o770)
    for name in files:
        path = os.path.join(directory, name)
        open(path, "a").close()
        os.chown(path, 0, RANK_GID)
        os.chmod(path, 0o660)
