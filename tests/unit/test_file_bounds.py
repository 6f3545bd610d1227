"""Files that are not lab or scenario files at all: each gets a located, one-line reason and a
hint, never a traceback, a hang or a large allocation (the loader refuses before it builds)."""

from __future__ import annotations

import resource
import time

import pytest

from twin.errors import LabFileError
from twin.lab import runtime
from twin.spec.labfile import load_lab
from twin.spec.yamlsrc import MAX_FILE_BYTES

ALIAS_BOMB = "name: mini\n" + "".join(
    f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9) if i else ', '.join(['x'] * 9)}]\n" for i in range(9))

CASES = {
    "latin1": (b"name: mini\n# caf\xe9\n", "mini.yaml:2: not UTF-8: byte 0xe9 at offset 16"),
    "utf16": ("name: mini\n".encode("utf-16"), "mini.yaml:1: the file is UTF-16"),
    "nul": (b"name: mini\x00\n", "mini.yaml:1: NUL byte at offset 10"),
    "control": (b"name: mini\nx: \"\x07\"\n", "mini.yaml:2: YAML: unacceptable character #x0007"),
    "two documents": (b"name: mini\n---\nname: mini\n", "mini.yaml:2: a second YAML document"),
    "tag": (b"name: !!str mini\n", "mini.yaml:1: YAML tag !!str is not supported"),
    "alias bomb": (ALIAS_BOMB.encode(), "mini.yaml:2: YAML anchors and aliases"),
    "too large": (b"name: mini\n" + b"#" * MAX_FILE_BYTES, "mini.yaml: file is 1.0 MB"),
}


def _message(path) -> str:
    with pytest.raises(LabFileError) as info:
        load_lab(path, runtime.names())
    return info.value.message


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_a_broken_file_gets_a_located_reason(case, tmp_path):
    content, expected = CASES[case]
    path = tmp_path / "mini.yaml"
    path.write_bytes(content)
    memory_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.monotonic()
    message = _message(path)
    assert expected in message.replace(str(tmp_path) + "/", ""), message
    assert "hint:" in message
    # Refused before anything was built: no time to speak of, no memory growth (the bomb expands to 9^9).
    assert time.monotonic() - started < 5
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - memory_before < 100_000  # KiB


def test_paths_that_are_not_files(tmp_path):
    (tmp_path / "dir.yaml").mkdir()
    (tmp_path / "loop.yaml").symlink_to(tmp_path / "loop.yaml")
    assert "is a directory" in _message(tmp_path / "dir.yaml")
    assert "symbolic link loop" in _message(tmp_path / "loop.yaml")
    assert "file not found" in _message(tmp_path / "absent.yaml")
