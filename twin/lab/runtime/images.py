"""The container images the docker runtime runs: names, and whether they match this code.

The host image carries the project (probe agent, collective workers), so an image built from
older code would run old agents against a new runner. Images are labelled with a digest of the
project's sources at build time; the runtime refuses an image whose digest differs.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

from twin import __version__

PACKAGE = Path(__file__).resolve().parents[2]  # twin/
SOURCE_LABEL = "fabric-twin.source"
IMAGES = {"switch": "fabric-twin-switch", "host": "fabric-twin-host"}


def image_kind(is_switch: bool) -> str:
    return "switch" if is_switch else "host"


def image_for(kind: str) -> str:
    return f"{IMAGES[kind]}:{__version__}"


def source_digest() -> str:
    """sha256 over the package's files (path and content), in a stable order."""
    digest = hashlib.sha256()
    for path in sorted(p for p in PACKAGE.rglob("*") if p.is_file() and p.suffix in (".py", ".j2")):
        digest.update(str(path.relative_to(PACKAGE)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


if __name__ == "__main__":  # `python -m twin.lab.runtime.images digest`, used by `make images`
    if sys.argv[1:] != ["digest"]:
        sys.exit("usage: python -m twin.lab.runtime.images digest")
    print(source_digest())
