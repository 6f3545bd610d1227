"""A lab or scenario file's bytes and text, bounded before anything parses them.

Refused with a located reason: what is not a regular file (a directory, a device, a FIFO that
would block, a kernel file under /proc, /sys or /dev whose size says nothing of what a read
returns: /proc/self/mem fails with EIO, /proc/self/pagemap is binary, /proc/kmsg waits for the
next kernel message), more than MAX_FILE_BYTES actually read (not as stat says), text that is not
UTF-8, a NUL byte, and characters YAML does not allow in a document (control characters).
"""

from __future__ import annotations

import errno
import os
import re
import stat
from pathlib import Path

from twin.errors import LabFileError, Problem

MAX_FILE_BYTES = 1 << 20  # the largest shipped file is 3 KB; a generated one with every key fits
PSEUDO_ROOTS = ("/proc", "/sys", "/dev")
# What YAML 1.2 allows in a stream (its c-printable), besides tab, newline and carriage return.
_NOT_PRINTABLE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x84\x86-\x9f\ufffe\uffff]")


def refuse(path: Path, line: int | None, message: str, hint: str) -> LabFileError:
    return LabFileError([Problem(str(path), line, "", message, hint)])


def read_bounded(path: Path) -> bytes:
    """At most MAX_FILE_BYTES of a regular file, or a clear error. Opened non-blocking (a FIFO),
    checked on the open descriptor (no race with a rename), read in a bounded loop."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        raise _open_error(path, exc.errno) from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise refuse(path, None, "is a directory, not a file", "give a path to a .yaml file")
        if not stat.S_ISREG(info.st_mode):
            raise refuse(path, None, "not a regular file (a device, FIFO or socket)", "give a path to a .yaml file")
        if any(_same_filesystem(info, root) for root in PSEUDO_ROOTS):
            raise refuse(path, None, "is a kernel file (/proc, /sys, /dev), not a lab or scenario file",
                         "give a path to a .yaml file")
        if info.st_size > MAX_FILE_BYTES:
            raise refuse(path, None, too_large(info.st_size), "is this the right file?")
        chunks, total = [], 0
        while total <= MAX_FILE_BYTES:
            chunk = os.read(fd, MAX_FILE_BYTES + 1 - total)
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > MAX_FILE_BYTES:
            raise refuse(path, None, too_large(total, exact=False), "is this the right file?")
        return b"".join(chunks)
    except OSError as exc:
        raise refuse(path, None, f"cannot read: {os.strerror(exc.errno or 0)}", "give a path to a .yaml file") from None
    finally:
        os.close(fd)


def _open_error(path: Path, number: int | None) -> LabFileError:
    if number == errno.ELOOP:
        return refuse(path, None, "symbolic link loop", "point the path at a real file")
    if number == errno.ENOENT:
        return refuse(path, None, "file not found", "give a path to a .yaml file or a name from labs/")
    if number == errno.EISDIR:
        return refuse(path, None, "is a directory, not a file", "give a path to a .yaml file")
    return refuse(path, None, f"cannot open: {os.strerror(number or 0)}", "check the path and its permissions")


def _same_filesystem(info: os.stat_result, root: str) -> bool:
    try:
        return os.stat(root).st_dev == info.st_dev
    except OSError:
        return False


def too_large(size: int, exact: bool = True) -> str:
    amount = f"{size / 1e6:.1f} MB" if exact else f"more than {MAX_FILE_BYTES >> 10} KiB"
    return f"file is {amount}; lab and scenario files are at most {MAX_FILE_BYTES >> 10} KiB"


def decoded(path: Path, raw: bytes) -> str:
    """The file's text, or a clear error: too large, UTF-16, not UTF-8, a NUL byte, a control
    character."""
    if len(raw) > MAX_FILE_BYTES:
        raise refuse(path, None, too_large(len(raw)), "is this the right file?")
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise refuse(path, 1, "the file is UTF-16", "save it as UTF-8")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise refuse(path, line, f"not UTF-8: byte 0x{raw[exc.start]:02x} at offset {exc.start}",
                     "save the file as UTF-8 (a latin-1 character in a comment is enough)") from None
    text = text.removeprefix("\ufeff")
    if "\x00" in text:
        offset = text.index("\x00")
        raise refuse(path, text.count("\n", 0, offset) + 1, f"NUL byte at offset {offset}", "is this a text file?")
    bad = _NOT_PRINTABLE.search(text)
    if bad:
        raise refuse(path, text.count("\n", 0, bad.start()) + 1,
                     f"YAML: unacceptable character #x{ord(bad.group()):04x} (a control character) at offset "
                     f"{bad.start()}", "remove control characters; write an escape such as \\x07 in double quotes")
    return text
