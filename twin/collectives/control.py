"""A rank's control file (`rank-N.control` in its job's directory): what a fault outside the
network asks of it (faults/ranks.py writes it whole, as JSON). The rank reads it before each step
(worker.py); the launcher reads it to tell a crash a fault asked for from a job failing."""

from __future__ import annotations

import json
from pathlib import Path


def control_file(directory: Path, rank: int) -> Path:
    return directory / f"rank-{rank}.control"


def asked(path: Path) -> dict:
    """What the file asks now; {} when there is none (or it is not an object)."""
    try:
        request = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return request if isinstance(request, dict) else {}
