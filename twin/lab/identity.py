"""Who a rank runs as. gloo binds only its listening socket to the NIC (GLOO_SOCKET_IFNAME);
its outgoing connections take their source address from routing. Ranks of rail r run as uid
RANK_UID_BASE + r, and each host has a `uidrange` rule sending that uid's traffic through
NIC r's table, so a rank's connections leave through its own rail whichever rail the peer is on.
Ranks also stop being root, which they never needed."""

from __future__ import annotations

import ctypes
import os

from twin.model.host_routing import RANK_UID_BASE, rank_uid

RANK_GID = RANK_UID_BASE


PR_SET_PDEATHSIG, PR_GET_PDEATHSIG = 1, 2


def become_rank(rail: int, home: str) -> None:
    """Run as rail `rail`'s rank from now on. A parent-death signal (a rank forked by its job's
    server, collectives/forkserver.py) is kept: the kernel clears it at a change of uid."""
    libc = ctypes.CDLL(None, use_errno=True)
    death_signal, parent = ctypes.c_int(0), os.getppid()
    libc.prctl(PR_GET_PDEATHSIG, ctypes.byref(death_signal))
    os.umask(0o007)  # ranks of different rails (uids) share the store file through the group
    os.setgroups([])
    os.setgid(RANK_GID)
    os.setuid(rank_uid(rail))
    os.environ["HOME"] = home
    if death_signal.value:
        libc.prctl(PR_SET_PDEATHSIG, death_signal.value)
        if os.getppid() != parent:  # the parent ended while the signal was cleared
            os.kill(os.getpid(), death_signal.value)


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
