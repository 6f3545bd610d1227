"""Lab state: what is running, owned by one lab, kept apart from the model.

Everything a lab creates is recorded here *before* it is created, so that
teardown can replay the record after a crash or kill -9. Lives under
$FABRIC_TWIN_RUN_DIR (default /run/fabric-twin)/<lab>/state.json.

Several processes change one lab's state at once (a fault injected while `twin probe` records
its agents, the dashboard, a training session, fault agents). Each holds the state it loaded;
`save` writes only what this process changed since then, merged into what is on disk now, under
an exclusive lock per lab (flock on state.lock), and replaces the file atomically (readers never
see half a file). A lock plus a three-way merge, rather than a database: the state stays one
small JSON file a person can read, teardown after a crash needs nothing but that file, and no
process has to hold the lock while it does slow work (apply a fault, start FRR).
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from twin.errors import TwinError
from twin.names import is_lab_name, lab_name
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
        """Write this process's changes since it loaded (or last saved) the state, merged into
        the state on disk now; then this object holds the merged state."""
        self.directory.mkdir(parents=True, exist_ok=True)
        with locked(self.directory):
            mine = asdict(self)
            base = getattr(self, "_base", None)
            merged = mine if base is None else _merge(base, mine, _read(self.lab) or base)
            data = dict(merged)
            if merged["sealed"]:
                data["faults"] = seal(key_of(self.directory), json.dumps(merged["faults"]))
            tmp = self.directory / f"state.json.{os.getpid()}.tmp"
            tmp.write_text(json.dumps(data, indent=1))
            os.replace(tmp, self.directory / "state.json")
        self._adopt(merged)

    def refresh(self) -> None:
        """Take in what other processes changed since this one loaded or saved the state (its
        own changes are saved with it: a merge that kept them only in memory would lose them)."""
        self.save()

    def _adopt(self, merged: dict) -> None:
        """Take the merged state, keeping this process's own objects (a fault record the caller
        still fills in stays the one in the list) but with what is on disk in them: an entry another
        process filled in since this one last looked would otherwise look changed here, and this
        process's next save would write the old one back."""
        for name, key in LIST_KEYS.items():
            own = {key(_plain(item)): item for item in getattr(self, name)}
            items = []
            for item in merged[name]:
                mine = own.get(key(item))
                if isinstance(mine, dict):
                    _update_in_place(mine, item)
                elif name == "resources":
                    fresh = Resource(**item)
                    mine = mine if mine == fresh else fresh
                else:
                    mine = item
                items.append(mine)
            getattr(self, name)[:] = items
        for name in merged.keys() - LIST_KEYS.keys():
            setattr(self, name, merged[name])
        object.__setattr__(self, "_base", json.loads(json.dumps(merged)))

    def record(self, resource: Resource) -> Resource:
        """Write the intent to create `resource` to disk, then let the caller create it."""
        self.resources.append(resource)
        self.save()
        return resource

    def daemons(self) -> list[Resource]:
        return [r for r in self.resources if r.kind == "daemon"]


# The lists of the state, and what identifies an entry of each (for the merge).
LIST_KEYS: dict[str, Callable[[Any], Any]] = {
    "resources": lambda r: (r["kind"], r["name"]),
    "faults": lambda f: f.get("id"),
    "drains": lambda d: d,
}


def _plain(item: Any) -> Any:
    return asdict(item) if isinstance(item, Resource) else item


def _update_in_place(mine: dict, merged: dict) -> None:
    """Make `mine` equal `merged` without replacing the dicts in it that a caller may hold."""
    for key in mine.keys() - merged.keys():
        del mine[key]
    for key, value in merged.items():
        if isinstance(mine.get(key), dict) and isinstance(value, dict):
            _update_in_place(mine[key], value)
        elif mine.get(key, object()) != value:
            mine[key] = value


def _merge(base: dict, mine: dict, disk: dict) -> dict:
    """Three-way merge: what this process changed since `base` (entries added, removed or
    changed; scalar fields set) applied to the state on `disk`."""
    merged = {}
    for name in mine:
        if name in LIST_KEYS:
            key = LIST_KEYS[name]
            before = {key(x): x for x in base.get(name, [])}
            now = {key(x): x for x in mine[name]}
            removed = before.keys() - now.keys()
            changed = {k: v for k, v in now.items() if before.get(k) != v}
            kept = [changed.pop(key(x), x) for x in disk.get(name, []) if key(x) not in removed]
            merged[name] = kept + list(changed.values())  # changed, not on disk: added here
        else:
            merged[name] = mine[name] if mine[name] != base.get(name) else disk.get(name, mine[name])
    return merged


@contextmanager
def locked(directory: Path) -> Iterator[None]:
    """The lab directory's lock: held while the state is merged and written, and while a port's
    physical-layer faults are read, changed and written back (lab/ports/phy.py)."""
    with open(directory / "state.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def lab_dir(lab: str) -> Path:
    """$FABRIC_TWIN_RUN_DIR/<lab>: `lab` checked to be a lab name first (never a path)."""
    return run_root() / lab_name(lab)


def _read(lab: str) -> dict | None:
    """The state on disk as plain data (faults unsealed); None if there is none."""
    path = lab_dir(lab) / "state.json"
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except json.JSONDecodeError:
        # A crash mid-write leaves the previous state.json intact (atomic replace),
        # so this is only a foreign or damaged file; treat the lab as known but empty.
        return asdict(LabState(lab=lab, runtime="netns", lab_file="", status="failed"))
    if raw.get("sealed") and isinstance(raw.get("faults"), str):
        try:
            raw["faults"] = json.loads(unseal(key_of(lab_dir(lab)), raw["faults"]))
        except TwinError:
            # The key is gone or the blob damaged: the faults cannot be read back, but teardown
            # must still work (removing the nodes removes every fault with them).
            raw["faults"], raw["sealed"] = [], False
    return raw


def load_state(lab: str) -> LabState | None:
    raw = _read(lab)
    if raw is None:
        return None
    state = LabState(**{**raw, "resources": [Resource(**r) for r in raw.get("resources", [])]})
    object.__setattr__(state, "_base", json.loads(json.dumps(asdict(state))))
    return state


def known_labs() -> list[str]:
    """Labs with a state directory on this machine (running, failed or half torn down)."""
    root = run_root()
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if p.is_dir() and not p.is_symlink() and is_lab_name(p.name))
