"""Finding lab files and the model of a running lab."""

from __future__ import annotations

import os
import re
from pathlib import Path

from twin.lab import runtime
from twin.model.build import build_fabric
from twin.errors import LabStateError
from twin.spec.labfile import LAB_NAME_PATTERN, LabFile, load_lab, resolve_lab_path
from twin.model.fabric import Fabric
from twin.lab.state import LabState, load_state

PACKAGE_LABS = Path(__file__).resolve().parents[2] / "labs"
LAB_COPY = "lab.yaml"


def search_dirs() -> list[Path]:
    dirs = [Path.cwd() / "labs", PACKAGE_LABS]
    extra = os.environ.get("FABRIC_TWIN_LABS")
    return ([Path(extra)] if extra else []) + dirs


def open_lab(name_or_path: str) -> tuple[LabFile, Fabric]:
    lab = load_lab(resolve_lab_path(name_or_path, search_dirs()), runtime.names())
    return lab, build_fabric(lab)


def lab_model(ref: str) -> Fabric:
    """The model of a lab that is up, by name (as it runs: it may have come from any path);
    otherwise of a lab file, by name or path."""
    if re.fullmatch(LAB_NAME_PATTERN, ref) and load_state(ref) is not None:
        try:
            return running_lab(ref)[1]
        except LabStateError:
            pass  # up, but no saved copy (it failed early): the lab file is all there is
    return open_lab(ref)[1]


def running_lab(name: str) -> tuple[LabState, Fabric]:
    """The state and model of a lab that is up (model from the copy saved at `up`)."""
    state = load_state(name)
    if state is None:
        raise LabStateError(f"lab '{name}' is not running", hint=f"start it with `twin lab up {name}`")
    copy = state.directory / LAB_COPY
    if not copy.is_file():
        raise LabStateError(f"lab '{name}' has no saved lab file (status: {state.status})",
                            hint=f"twin lab down {name}")
    lab = load_lab(copy, runtime.names())
    fabric = build_fabric(lab)
    fabric.runtime = state.runtime  # `--runtime` may have overridden the lab file's
    return state, fabric
