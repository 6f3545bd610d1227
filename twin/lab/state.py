"""Lab state: what is running, owned by one lab, kept apart from the model.

Everything a lab creates is recorded here *before* it is created, so that
teardown can replay the record after a crash or kill -9. Lives under
$FABRIC_TWIN_RUN_DIR (default /run/fabric-twin)/<lab>/state.json.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from twin.errors import TwinError
from twin.seal import key_of, seal, unseal

DEFAULT_RUN_ROOT = "/run/fabric-twin"


def run_root() -> Path:
    return Path(os.environ.get("FABRIC_TWIN_RUN_DIR", DEFAULT_RUN_ROOT))


@dataclass
class Resource:
    kind: str  # "netns", "daemon", ...
    name: str  # namespace name, or "<node>/<daemon>"
    node: str | None = None
    pid: int | None = None


@dataclass
class LabState:
    lab: str
    runtime: str
    lab_file: str
    status: str = "deploying"  # deploying | up | failed | tearing-down
    created: float = field(default_factory=time.time)
    resources: list[Resource] = field(default_factory=list)
    timings_s: dict[str, float] = field(default_factory=dict)
    faults: list[dict] = field(default_factory=list)  # active faults: spec + what undoes them
    drains: list[str] = field(default_factory=list)  # links taken out of service (mitigate/drain.py)
    sealed: bool = False  # a training session: `faults` is written sealed (twin/seal.py)

    @property
    def directory(self) -> Path:
        return lab_dir(self.lab)

    def node_dir(self, node: str) -> Path:
        return self.directory / "nodes" / node

    def save(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        tmp = self.directory / "state.json.tmp"
        data = asdict(self)
        if self.sealed:
            data["faults"] = seal(key_of(self.directory), json.dumps(data["faults"]))
        tmp.write_text(json.dumps(data, indent=1))
        os.replace(tmp, self.directory / "state.json")

    def record(self, resource: Resource) -> Resource:
        """Write the intent to create `resource` to disk, then let the caller create it."""
        self.resources.append(resource)
        self.save()
        return resource

    def daemons(self) -> list[Resource]:
        return [r for r in self.resources if r.kind == "daemon"]


def lab_dir(lab: str) -> Path:
    return run_root() / lab


def load_state(lab: str) -> LabState | None:
    path = lab_dir(lab) / "state.json"
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except json.JSONDecodeError:
        # A crash mid-write leaves the previous state.json intact (atomic replace),
        # so this is only a foreign or damaged file; treat the lab as known but empty.
        return LabState(lab=lab, runtime="netns", lab_file="", status="failed")
    raw["resources"] = [Resource(**r) for r in raw.get("resources", [])]
    if raw.get("sealed") and isinstance(raw.get("faults"), str):
        try:
            raw["faults"] = json.loads(unseal(key_of(lab_dir(lab)), raw["faults"]))
        except TwinError:
            # The key is gone or the blob damaged: the faults cannot be read back, but teardown
            # must still work (removing the nodes removes every fault with them).
            raw["faults"], raw["sealed"] = [], False
    return LabState(**raw)


def known_labs() -> list[str]:
    """Labs with a state directory on this machine (running, failed or half torn down)."""
    root = run_root()
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if p.is_dir())
