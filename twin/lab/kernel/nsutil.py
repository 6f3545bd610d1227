"""Small helpers around Linux network namespaces that pyroute2 does not offer as such."""

from __future__ import annotations

import ctypes
import errno
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


CLONE_NEWNET = 0x40000000
MS_BIND, MS_REC, MS_SHARED = 0x1000, 0x4000, 1 << 20
_libc = ctypes.CDLL(None, use_errno=True)


def _libc_call(name: str, *args) -> None:
    if getattr(_libc, name)(*args) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{name}: {os.strerror(code)}")


def _share_mounts_under(directory: str) -> None:
    """Make `directory` a shared mount, as `ip netns add` does, so a namespace bound in it is seen
    from every mount namespace (a container's too): a directory that is no mount point yet is first
    bound onto itself."""
    os.makedirs(directory, exist_ok=True)
    try:
        _libc_call("mount", b"", directory.encode(), b"none", MS_SHARED | MS_REC, None)
    except OSError as exc:
        if exc.errno != errno.EINVAL:
            raise
        _libc_call("mount", directory.encode(), directory.encode(), b"none", MS_BIND | MS_REC, None)
        _libc_call("mount", b"", directory.encode(), b"none", MS_SHARED | MS_REC, None)


def create_netns(path: str) -> None:
    """A new network namespace, kept by a bind mount at `path` (as `ip netns add` keeps one),
    made by the calling thread, which returns to its own namespace. Not pyroute2's netns.create:
    it forks a child per namespace and gives it 2 s, and the kernel makes a new namespace only once
    it has finished removing earlier ones (cleanup_net), which after a big lab took longer: AIPod's
    bring-up right after its teardown failed at its first namespace. FileExistsError if `path`
    exists."""
    _share_mounts_under(os.path.dirname(path))
    os.close(os.open(path, os.O_RDONLY | os.O_CREAT | os.O_EXCL, 0))
    saved = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        try:
            _libc_call("unshare", CLONE_NEWNET)
            try:
                _libc_call("mount", b"/proc/thread-self/ns/net", path.encode(), b"none", MS_BIND, None)
            finally:
                pr_netns.setns(saved)
        except BaseException:
            os.unlink(path)
            raise
    finally:
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


SIOCGIFMTU, SIOCGIFHWADDR = 0x8921, 0x8927  # linux/sockios.h
IFREQ_MTU = struct.Struct("16si")  # struct ifreq: the name, then ifr_mtu
IFREQ_HWADDR = struct.Struct("16sH6s8x")  # the name, then ifr_hwaddr: a sockaddr (family, 14 bytes)


def _per_interface(path: str, request: int, layout: struct.Struct) -> dict[str, tuple]:
    """ifname -> one ioctl's answer (its fields after the name) for every interface in the
    namespace at `path`, on a socket made there: no netlink dump to decode (pyroute2's is slow at
    scale)."""
    with in_netns(path), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        asked = {name: name.encode().ljust(layout.size, b"\0") for _index, name in socket.if_nameindex()}
        return {name: layout.unpack(fcntl.ioctl(sock.fileno(), request, ask))[1:] for name, ask in asked.items()}


def interface_mtus(path: str) -> dict[str, int]:
    """ifname -> MTU in the namespace at `path`."""
    return {name: fields[0] for name, fields in _per_interface(path, SIOCGIFMTU, IFREQ_MTU).items()}


def interface_macs(path: str) -> dict[str, bytes]:
    """ifname -> hardware address (6 bytes) in the namespace at `path`."""
    return {name: fields[1] for name, fields in _per_interface(path, SIOCGIFHWADDR, IFREQ_HWADDR).items()}


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
