"""Each benchmark owns one section of docs/benchmarks.md, between its begin/end markers."""

from __future__ import annotations

from pathlib import Path


def write_section(path: Path, begin: str, end: str, section: str) -> None:
    """Replace the text between `begin` and `end` (markers included) with `section`, or append it."""
    old = path.read_text() if path.exists() else "# Benchmarks\n\n"
    if begin in old:
        new = old[:old.index(begin)] + section + old[old.index(end) + len(end) + 1:]
    else:
        new = old.rstrip("\n") + "\n\n" + section
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(new)


def emit(lines: list[str], out: Path | None, begin: str, end: str) -> None:
    """A benchmark's section (its lines between the markers): printed, and written to `out`."""
    section = "\n".join([*lines, end]) + "\n"
    print(section)
    if out:
        write_section(out, begin, end, section)
