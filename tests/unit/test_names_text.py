"""Names people give (twin/names.py) are checked before they touch the file system, and text
people gave is escaped before it reaches a terminal (twin/text.py)."""

from __future__ import annotations

import pytest

from twin.events import read_jsonl
from twin.lab.state import lab_dir
from twin.names import InvalidNameError, lab_name, trainee_name
from twin.text import foreign_characters, key_note, shown, shown_name


@pytest.mark.parametrize("name", ["../x", "/tmp", "", ".", "..", "a/b", "mini\n", "Mini", "a" * 13, "-a", "1a",
                                  "a\x1b[2J", "mіni"])
def test_a_path_is_not_a_lab_name(name, tmp_path, monkeypatch):
    monkeypatch.setenv("FABRIC_TWIN_RUN_DIR", str(tmp_path))
    with pytest.raises(InvalidNameError):
        lab_name(name)
    with pytest.raises(InvalidNameError):  # the one place a lab's directory is made from its name
        lab_dir(name)


def test_lab_names_pass_through(tmp_path, monkeypatch):
    monkeypatch.setenv("FABRIC_TWIN_RUN_DIR", str(tmp_path))
    assert lab_name("rail4") == "rail4"
    assert lab_dir("d-rail4") == tmp_path / "d-rail4"


@pytest.mark.parametrize("name", ["../x", ".", "..", "", "a/b", "x" * 65, ".hidden"])
def test_trainee_names(name):
    with pytest.raises(InvalidNameError):
        trainee_name(name)
    assert trainee_name("ops.jane_doe-2") == "ops.jane_doe-2"


def test_control_and_invisible_characters_are_escaped():
    assert shown("\x1b[2J\x1b[32mOK") == "\\x1b[2J\\x1b[32mOK"
    assert shown("a\u200bb\u202ec") == "a\\u200bb\\u202ec"
    assert shown("line one\nline two", keep_newlines=True) == "line one\nline two"
    assert shown("line one\nline two") == "line one\\x0aline two"
    assert shown("café rail4") == "café rail4"  # printable non-ASCII text stays as it is


def test_keys_show_look_alikes():
    assert shown_name("f\u0430bric") == "f\\u0430bric"
    assert foreign_characters("f\u0430bric") == "\\u0430 is CYRILLIC SMALL LETTER A"
    assert key_note("fabric") == ""
    assert "ZERO WIDTH SPACE" in key_note("li\u200bnks")


def test_a_damaged_jsonl_file_reads_what_is_whole(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_bytes(b'{"t": 0, "kind": "a"}\n\xff garbage\n[1]\n{"t": 1}\n{"t": 2, "kind": "b"}\n{"t": 3, "ki')
    records, damage = read_jsonl(path, ("t", "kind"))
    assert [r["kind"] for r in records] == ["a", "b"]
    assert damage.lines == [2, 3, 4, 6] and damage.cut_last
    records, damage = read_jsonl(path, ())  # any object is a record when no key is required
    assert len(records) == 3 and damage.lines == [2, 3, 6]
