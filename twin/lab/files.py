"""Finding lab files: by path, or by name in ./labs, the shipped labs/ and $FABRIC_TWIN_LABS."""

from __future__ import annotations

import os
from pathlib import Path

from twin.lab import runtime
from twin.model.build import build_fabric
from twin.model.fabric import Fabric
from twin.spec.labfile import LabFile, load_lab, resolve_lab_path

PACKAGE_LABS = Path(__file__).resolve().parents[2] / "labs"


def search_dirs() -> list[Path]:
    dirs = [Path.cwd() / "labs", PACKAGE_LABS]
    extra = os.environ.get("FABRIC_TWIN_LABS")
    return ([Path(extra)] if extra else []) + dirs


def open_lab(name_or_path: str) -> tuple[LabFile, Fabric]:
    """The lab file (validated) and its built, frozen model."""
    lab = load_lab(resolve_lab_path(name_or_path, search_dirs()), runtime.names())
    return lab, build_fabric(lab)
