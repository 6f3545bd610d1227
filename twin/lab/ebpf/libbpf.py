"""libbpf (Debian's libbpf1) through ctypes: open a compiled BPF object, size its maps, load it
(the kernel verifies every program), and hand out the programs' and maps' file descriptors;
read and write map elements.

The object stays open while its descriptors are in use (`close` releases them); a program
attached to a tc hook keeps itself and its maps alive after that, until the hook goes.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

from twin.errors import MissingDependencyError, TwinError

LOG_SIZE = 1 << 20


class BpfError(TwinError):
    pass


class _TestRun(ctypes.Structure):
    """struct bpf_test_run_opts (bpf/bpf.h)."""
    _fields_ = [("sz", ctypes.c_size_t), ("data_in", ctypes.c_void_p), ("data_out", ctypes.c_void_p),
                ("data_size_in", ctypes.c_uint32), ("data_size_out", ctypes.c_uint32),
                ("ctx_in", ctypes.c_void_p), ("ctx_out", ctypes.c_void_p), ("ctx_size_in", ctypes.c_uint32),
                ("ctx_size_out", ctypes.c_uint32), ("retval", ctypes.c_uint32), ("repeat", ctypes.c_int),
                ("duration", ctypes.c_uint32), ("flags", ctypes.c_uint32), ("cpu", ctypes.c_uint32),
                ("batch_size", ctypes.c_uint32)]


def _library() -> ctypes.CDLL:
    name = ctypes.util.find_library("bpf") or "libbpf.so.1"
    try:
        lib = ctypes.CDLL(name, use_errno=True)
    except OSError:
        raise MissingDependencyError("libbpf is not installed", hint="run `make deps` (Debian's libbpf1)") from None
    pointer, string, integer = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int
    for function, result, arguments in (
            ("bpf_object__open_file", pointer, [string, pointer]),
            ("bpf_object__find_map_by_name", pointer, [pointer, string]),
            ("bpf_object__find_program_by_name", pointer, [pointer, string]),
            ("bpf_object__next_program", pointer, [pointer, pointer]),
            ("bpf_object__load", integer, [pointer]),
            ("bpf_object__close", None, [pointer]),
            ("bpf_map__set_max_entries", integer, [pointer, ctypes.c_uint32]),
            ("bpf_map__fd", integer, [pointer]),
            ("bpf_map__max_entries", ctypes.c_uint32, [pointer]),
            ("bpf_program__fd", integer, [pointer]),
            ("bpf_program__set_log_buf", integer, [pointer, string, ctypes.c_size_t]),
            ("bpf_program__set_log_level", integer, [pointer, ctypes.c_uint32]),
            ("bpf_map_update_elem", integer, [integer, pointer, pointer, ctypes.c_uint64]),
            ("bpf_map_lookup_elem", integer, [integer, pointer, pointer]),
            ("bpf_map_delete_elem", integer, [integer, pointer]),
            ("bpf_map_get_next_key", integer, [integer, pointer, pointer]),
            ("bpf_map_lookup_batch", integer, [integer, pointer, pointer, pointer, pointer,
                                               ctypes.POINTER(ctypes.c_uint32), pointer]),
            ("bpf_prog_test_run_opts", integer, [integer, ctypes.POINTER(_TestRun)]),
            ("bpf_map_get_fd_by_id", integer, [ctypes.c_uint32]),
            ("bpf_obj_get_info_by_fd", integer, [integer, pointer, ctypes.POINTER(ctypes.c_uint32)]),
            ("bpf_enable_stats", integer, [integer]),
            ("libbpf_set_print", pointer, [pointer])):
        getattr(lib, function).restype = result
        getattr(lib, function).argtypes = arguments
    lib.libbpf_set_print(None)  # errors come back as values here, with the verifier's log
    return lib


@lru_cache(maxsize=1)
def _lib() -> ctypes.CDLL:
    """The library, loaded once (like an imported module)."""
    return _library()


class BpfObject:
    """A compiled object (clang -target bpf), opened, its maps sized, loaded into the kernel."""

    def __init__(self, path: Path, max_entries: dict[str, int] | None = None):
        self.path = path
        if not path.is_file():
            raise MissingDependencyError(f"the BPF object {path} is not built",
                                         hint="run `make deps` (clang builds it)")
        lib = _lib()
        self._obj = lib.bpf_object__open_file(str(path).encode(), None)
        if not self._obj:
            raise BpfError(f"cannot open BPF object {path}: {os.strerror(ctypes.get_errno())}",
                           hint="rebuild it: make deps")
        try:
            for name, entries in (max_entries or {}).items():
                if lib.bpf_map__set_max_entries(self._map(name), max(1, entries)) < 0:
                    raise BpfError(f"cannot size BPF map {name}", hint=str(path))
            self._load(lib)
        except BaseException:
            self.close()
            raise

    def _load(self, lib: ctypes.CDLL) -> None:
        error = lib.bpf_object__load(self._obj)
        if error == 0:
            return
        # Loaded without the verifier's log first (writing it costs most of a load); again with it
        # for the reason. libbpf keeps the log buffers: they must outlive the load.
        lib.bpf_object__close(self._obj)
        self._obj = lib.bpf_object__open_file(str(self.path).encode(), None)
        logs = []
        program = lib.bpf_object__next_program(self._obj, None)
        while program:
            buffer = ctypes.create_string_buffer(LOG_SIZE)
            logs.append(buffer)
            lib.bpf_program__set_log_buf(program, buffer, LOG_SIZE)
            lib.bpf_program__set_log_level(program, 1)
            program = lib.bpf_object__next_program(self._obj, program)
        lib.bpf_object__load(self._obj)
        detail = [line for buffer in logs for line in buffer.value.decode(errors="replace").splitlines()][-12:]
        raise BpfError(f"the kernel refused BPF object {self.path.name}: {os.strerror(-error)}",
                       hint="verifier: " + " | ".join(detail) if detail else "needs root and a kernel with BPF")

    def _map(self, name: str) -> int:
        found = _lib().bpf_object__find_map_by_name(self._obj, name.encode())
        if not found:
            raise BpfError(f"BPF object {self.path.name} has no map {name!r}", hint="rebuild it: make deps")
        return found

    def map_fd(self, name: str) -> int:
        return _lib().bpf_map__fd(self._map(name))

    def max_entries(self, name: str) -> int:
        return _lib().bpf_map__max_entries(self._map(name))

    def program_fd(self, name: str) -> int:
        program = _lib().bpf_object__find_program_by_name(self._obj, name.encode())
        if not program:
            raise BpfError(f"BPF object {self.path.name} has no program {name!r}", hint="rebuild it: make deps")
        return _lib().bpf_program__fd(program)

    def close(self) -> None:
        if self._obj:
            _lib().bpf_object__close(self._obj)
            self._obj = None


def run_on_packet(program_fd: int, packet: bytes, repeat: int = 1) -> tuple[int, bytes, int]:
    """Run a loaded program `repeat` times on `packet` (BPF_PROG_TEST_RUN: no device, no traffic;
    a tc program sees it on the loopback of the caller's namespace). Returns (its verdict, the
    packet as the last run left it, the kernel's mean time per run in ns)."""
    data_in = ctypes.create_string_buffer(packet, len(packet))
    data_out = ctypes.create_string_buffer(len(packet) + 256)
    opts = _TestRun(sz=ctypes.sizeof(_TestRun), data_in=ctypes.addressof(data_in), data_out=ctypes.addressof(data_out),
                    data_size_in=len(packet), data_size_out=len(data_out), repeat=repeat)
    error = _lib().bpf_prog_test_run_opts(program_fd, ctypes.byref(opts))
    if error < 0:
        raise OSError(-error, os.strerror(-error))
    return opts.retval, data_out.raw[:opts.data_size_out], opts.duration


BPF_STATS_RUN_TIME = 0


@contextmanager
def enable_run_time_stats() -> Iterator[None]:
    """The kernel counts every BPF program's runs and run time (run_cnt, run_time_ns) while this
    holds the file descriptor BPF_ENABLE_STATS returned: no sysctl is changed, and the counting
    stops when the last holder closes it (or exits)."""
    fd = _lib().bpf_enable_stats(BPF_STATS_RUN_TIME)
    if fd < 0:
        raise OSError(-fd, os.strerror(-fd))
    try:
        yield
    finally:
        os.close(fd)


class _MapInfo(ctypes.Structure):
    """The head of struct bpf_map_info (linux/bpf.h); the kernel fills what it has up to the size given."""
    _fields_ = [("type", ctypes.c_uint32), ("id", ctypes.c_uint32), ("key_size", ctypes.c_uint32),
                ("value_size", ctypes.c_uint32), ("max_entries", ctypes.c_uint32), ("map_flags", ctypes.c_uint32),
                ("name", ctypes.c_char * 16)]


def map_by_id(map_id: int, name: str) -> int:
    """A file descriptor of the map with this id, which must be named `name` (ids are the kernel's,
    reused once a map is gone). The caller closes it (os.close)."""
    fd = _lib().bpf_map_get_fd_by_id(map_id)
    if fd < 0:
        raise BpfError(f"no BPF map {name} with id {map_id}: {os.strerror(ctypes.get_errno() or -fd)}",
                       hint="the lab's programs are gone: is the lab up?")
    info, size = _MapInfo(), ctypes.c_uint32(ctypes.sizeof(_MapInfo))
    if _lib().bpf_obj_get_info_by_fd(fd, ctypes.byref(info), ctypes.byref(size)) < 0 or info.name.decode() != name:
        os.close(fd)
        raise BpfError(f"BPF map {map_id} is not the lab's {name}", hint="the lab's programs are gone: is the lab up?")
    return fd


def map_id(fd: int) -> int:
    info, size = _MapInfo(), ctypes.c_uint32(ctypes.sizeof(_MapInfo))
    if _lib().bpf_obj_get_info_by_fd(fd, ctypes.byref(info), ctypes.byref(size)) < 0:
        raise BpfError(f"cannot read BPF map {fd}'s id: {os.strerror(ctypes.get_errno())}")
    return info.id


def update(fd: int, key: bytes, value: bytes) -> None:
    error = _lib().bpf_map_update_elem(fd, ctypes.c_char_p(key), ctypes.c_char_p(value), 0)
    if error < 0:
        raise OSError(-error, os.strerror(-error))


def delete(fd: int, key: bytes) -> bool:
    """Remove an element; False if it was not there."""
    error = _lib().bpf_map_delete_elem(fd, ctypes.c_char_p(key))
    if error == -2:  # ENOENT
        return False
    if error < 0:
        raise OSError(-error, os.strerror(-error))
    return True


def next_key(fd: int, key: bytes | None, key_size: int) -> bytes | None:
    """The key after `key` (None: the first), or None past the last."""
    following = ctypes.create_string_buffer(key_size)
    error = _lib().bpf_map_get_next_key(fd, ctypes.c_char_p(key) if key is not None else None, following)
    return None if error < 0 else following.raw


def lookup(fd: int, key: bytes, value_size: int) -> bytes | None:
    value = ctypes.create_string_buffer(value_size)
    error = _lib().bpf_map_lookup_elem(fd, ctypes.c_char_p(key), value)
    return None if error < 0 else value.raw


def lookup_array(fd: int, count: int, value_size: int) -> list[bytes]:
    """The values of an array map's first `count` elements, in one system call (a batch lookup)
    where one lookup an element would release and retake the interpreter's lock each time."""
    if count <= 0:
        return []
    keys = (ctypes.c_uint32 * count)()
    values = ctypes.create_string_buffer(count * value_size)
    found, resume_at = ctypes.c_uint32(count), ctypes.c_uint32()
    error = _lib().bpf_map_lookup_batch(fd, None, ctypes.byref(resume_at), keys, values, ctypes.byref(found), None)
    if error < 0 and error != -errno.ENOENT:  # ENOENT: the batch reached the map's end
        raise OSError(-error, os.strerror(-error))
    raw = values.raw
    return [raw[at:at + value_size] for at in range(0, found.value * value_size, value_size)]
