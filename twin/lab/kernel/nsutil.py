"""Small helpers around Linux network namespaces that pyroute2 does not offer as such."""

from __future__ import annotations

import fcntl
import os
import socket
import struct
from collections.abc import Iterator
from contextlib import contextmanager

from pyroute2 import IPRoute
from pyroute2 import netns as pr_netns


@contextmanager
def in_netns(path: str) -> Iterator[None]:
    """Run the block with the calling thread inside the namespace at `path`.

    Sockets and /proc/sys/net files opened inside stay bound to that namespace
    after the block. Opening by fd avoids pyroute2's create-if-missing default.
    """
    target = os.open(path, os.O_RDONLY)
    saved = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        pr_netns.setns(target)
        try:
            yield
        finally:
            pr_netns.setns(saved)
    finally:
        os.close(target)
        os.close(saved)


def netns_inode(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def pids_in_netns(path: str) -> list[int]:
    """Every process whose network namespace is the one at `path` (like `ip netns pids`)."""
    wanted = netns_inode(path)
    if wanted is None:
        return []
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            st = os.stat(f"/proc/{entry}/ns/net")
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == wanted:
            pids.append(int(entry))
    return pids


def write_sysctls(path: str, settings: dict[str, str]) -> None:
    """Write net.* sysctls inside the namespace at `path` (they are per namespace)."""
    with in_netns(path):
        for key, value in settings.items():
            with open("/proc/sys/" + key.replace(".", "/"), "w") as handle:
                handle.write(value)


def read_sysctl(path: str, key: str) -> str:
    """One net.* sysctl inside the namespace at `path`."""
    with in_netns(path), open("/proc/sys/" + key.replace(".", "/")) as handle:
        return handle.read().strip()


def interface_indexes(path: str) -> dict[str, int]:
    """ifname -> ifindex in the namespace at `path` (libc's if_nameindex: no netlink parsing in
    Python, which cost ~5 ms a namespace through pyroute2)."""
    with in_netns(path):
        return {name: index for index, name in socket.if_nameindex()}


SIOCGIFMTU = 0x8921  # linux/sockios.h


def _per_interface(path: str, request: int, layout: str) -> dict[str, int]:
    """ifname -> one ioctl's answer for every interface in the namespace at `path`, on a socket
    made there: no netlink dump to decode (pyroute2's is slow at scale)."""
    with in_netns(path), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        asked = {name: struct.pack(layout, name.encode(), 0) for _index, name in socket.if_nameindex()}
        return {name: struct.unpack(layout, fcntl.ioctl(sock.fileno(), request, ask))[1] for name, ask in asked.items()}


def interface_mtus(path: str) -> dict[str, int]:
    """ifname -> MTU in the namespace at `path`."""
    return _per_interface(path, SIOCGIFMTU, "16si")


def netlink_in(path: str, strict_check: bool = False) -> IPRoute:
    """A pyroute2 netlink socket in the namespace at `path`, made there by this thread. pyroute2's
    own `IPRoute(netns=...)` forks a child to make it (17 ms a namespace here, half the time of a
    whole rail4 snapshot's dumps); a missing namespace fails (FileNotFoundError), never reappears."""
    with in_netns(path):
        fd = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, socket.NETLINK_ROUTE).detach()
    try:
        return IPRoute(fileno=fd, strict_check=strict_check)  # the socket is IPRoute's from here
    except BaseException:
        os.close(fd)
        raise


def socket_in(path: str, kind: int, proto: int = 0, family: int = socket.AF_INET) -> socket.socket:
    """A socket (AF_INET unless told) that lives in the namespace at `path` (whatever thread uses it later)."""
    with in_netns(path):
        return socket.socket(family, kind, proto)
