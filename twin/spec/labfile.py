"""The lab file contract (docs/formats.md): schema, loading, semantic checks.

Loading never touches the machine. Every problem is collected with file, line and
a hint, then raised once as a LabFileError.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from twin.errors import LabFileError, Problem, TwinError
from twin.names import LAB_NAME_PATTERN
from twin.spec.yamlsrc import SourceMap, read_yaml, validate
from twin.units import parse_rate_bps, parse_size_bytes, parse_time_s


def _check_rate(value: str) -> str:
    bps = parse_rate_bps(value)
    if not 1_000_000 <= bps <= 10_000_000_000:
        raise ValueError("rate must be between 1mbit and 10gbit (scale line rates down, e.g. 200mbit)")
    return value


def _check_delay(value: str) -> str:
    if not 0 <= parse_time_s(value) <= 1:
        raise ValueError("a link's one-way delay is at most 1 s (a scaled fabric's are microseconds), e.g. 20us")
    return value


def _check_size(value: str) -> str:
    if not 1_000 <= parse_size_bytes(value) <= 1_000_000_000:
        raise ValueError("a queue size must be between 1KB and 1GB, e.g. 256KB")
    return value


Rate = Annotated[str, AfterValidator(_check_rate)]
Delay = Annotated[str, AfterValidator(_check_delay)]
Size = Annotated[str, AfterValidator(_check_size)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class FabricSpec(_Strict):
    tiers: Literal[2, 3] = Field(description="2 = leaf/spine, 3 = leaf/spine/superspine")
    groups: int = Field(1, ge=1, le=64, description="aggregation groups (pods), 1 to 64")
    rails: int = Field(1, ge=1, le=64, description="NICs per host = leaves per group, 1 to 64")
    hosts_per_group: int = Field(ge=1, le=4096, description="hosts in each group, 1 to 4096")
    spines_per_plane: int = Field(
        ge=1, le=64, description="3-tier: spines in each rail plane; 2-tier: spines in total")
    superspines: int | None = Field(
        None, ge=1, le=64, description="3-tier only: every spine connects to every superspine")
    nic_ports: Literal[1, 2] = Field(
        1, description="ports per NIC: 1, or 2 to two leaves of its rail (leaf-gG-rR-a and -b), the NIC's "
                       "address reachable through both (dual-ToR)")
    dual_plane: bool = Field(
        False, description="with nic_ports: 2, the -a leaves reach only spines of their own (spine-N-a, "
                           "spine-rR-sN-a) and the -b leaves only theirs: two planes, as Alibaba HPN wires "
                           "dual-ToR, so the port a packet leaves by is the port it arrives on; spines_per_plane "
                           "is then each plane's")


class LinksSpec(_Strict):
    rate: Rate = Field("200mbit", description="line rate of every link, e.g. 200mbit")
    mtu: int = Field(9000, ge=1280, le=9216, description="MTU of every link, 1280 to 9216")
    delay: Delay | None = Field(None, description="one-way delay per link, e.g. 20us (needs netem)")
    pfc: bool = Field(True, description="true: lossless, a filling queue pauses its senders (PFC); "
                                        "false: lossy, a full queue drops")
    buffer: Size | None = Field(None, description="egress queue of every switch port, e.g. 512KB "
                                                  "(default: XOFF plus headroom for each port's senders)")
    pfc_xoff: Size | None = Field(None, description="queue above which the senders are paused, e.g. 50KB "
                                                    "(default: 4 ms of line rate, at least 4 frames)")
    pfc_xon: Size | None = Field(None, description="queue below which they resume (default: half of XOFF)")
    pfc_watchdog_ms: int | None = Field(None, ge=10, le=60000,
                                        description="a queue paused this long stops honouring pauses "
                                                    "and drops (a PFC watchdog); omitted = off")
    ecn: bool | None = Field(None, description="switch queues mark ECN-capable packets (CE) as they fill, "
                                                "so DCQCN and TCP slow down before PFC pauses; default: "
                                                "as pfc (on when lossless)")
    ecn_kmin: Size | None = Field(None, description="no marks at or below this queue, e.g. 20KB (default: "
                                                    "0.5 ms of line rate, at least 3 frames)")
    ecn_kmax: Size | None = Field(None, description="every ECN-capable packet marked above this, e.g. 50KB "
                                                    "(default: 2 ms of line rate, half of XOFF)")
    ecn_pmax: float | None = Field(None, gt=0, le=1, description="marking probability just below ecn_kmax, "
                                                                 "0 < p <= 1 (default: 0.1)")


class BfdSpec(_Strict):
    interval_ms: int = Field(300, ge=10, le=60000, description="BFD tx/rx interval in ms")
    multiplier: int = Field(3, ge=1, le=255, description="BFD detect multiplier")
    offload: bool = Field(True, description="true: one process sends and times every switch's BFD packets, "
                                            "as switch ASICs do, bfdd stays the control plane (netns runtime); "
                                            "false: each bfdd does its own (2.5 times the CPU a packet)")


class RoutingSpec(_Strict):
    bfd: BfdSpec = Field(default_factory=BfdSpec, description="{interval_ms: 300, multiplier: 3, offload: true}")
    ecmp_hash: Literal["l3", "l4"] = Field("l4", description="l3 (addresses) or l4 (5-tuple)")
    asn_plan: Literal["auto", "2-byte", "4-byte"] = Field(
        "auto", description="private ASNs (RFC 6996): 2-byte while they suffice (488 leaves), "
                            "else 4-byte; or either one always")
    load_balance: Literal["ecmp", "flowlet", "packet"] = Field(
        "ecmp", description="ecmp (the kernel's hash) | flowlet | packet: adaptive routing of packets "
                            "their NIC marks reorderable, to the uplink whose queue holds least")
    hash_offset: bool = Field(False, description="the switches hash TCP/UDP flows themselves, so that a host "
                                                 "adding k to its source port's low byte moves the flow k members "
                                                 "along every ECMP group (deterministic path control)")
    host_routes: Literal["link", "leaf"] = Field(
        "link", description="link: every host link's /31 announced alone | leaf: each leaf announces its "
                            "host links as the fewest prefixes that cover exactly them, as a ToR announces "
                            "its servers' subnet")
    flowlet_gap: Delay | None = Field(None, description="flowlet: a flow idle this long may take another "
                                                        "uplink, e.g. 5ms (default: the longest queue's "
                                                        "drain time at line rate)")


class LabSpec(_Strict):
    name: str = Field(pattern=LAB_NAME_PATTERN,
                      description="lowercase letter, then up to 11 of a-z 0-9 -; prefixes every object")
    fabric: FabricSpec = Field(description="tiers, groups, rails, hosts_per_group, spines_per_plane")
    links: LinksSpec = Field(default_factory=LinksSpec, description="rate, mtu, pfc, buffer, ecn")
    routing: RoutingSpec = Field(default_factory=RoutingSpec, description="bfd, ecmp_hash, load_balance")
    runtime: str = Field("netns", description="netns (default) or docker")
    lldp: bool = Field(True, description="every node runs LLDP (lldpd), so the cabling can be audited "
                                         "against the lab (config-audit); false saves its processes")


@dataclass(frozen=True)
class LabFile:
    """A validated lab file and where each of its keys stands."""

    path: Path
    spec: LabSpec
    source: SourceMap

    def line(self, *loc) -> int | None:
        return self.source.line(tuple(loc))


def _semantic_problems(lab: LabFile, runtimes: list[str]) -> list[Problem]:
    spec, path = lab.spec, str(lab.path)
    fabric = spec.fabric
    found = []

    def problem(loc: tuple, message: str, hint: str) -> None:
        found.append(Problem(path, lab.line(*loc), ".".join(loc), message, hint))

    if fabric.tiers == 3 and fabric.superspines is None:
        problem(("fabric", "tiers"), "a 3-tier fabric needs superspines",
                "add `superspines: 2` under fabric")
    if fabric.tiers == 2 and fabric.superspines is not None:
        problem(("fabric", "superspines"), "a 2-tier fabric has no superspines",
                "remove the key or set `tiers: 3`")
    leaves = fabric.groups * fabric.rails * fabric.nic_ports
    if spec.routing.asn_plan == "2-byte" and not fits_two_byte_asns(fabric):
        problem(("routing", "asn_plan"), f"{leaves} leaves and {fabric.rails} rail planes do not fit the 2-byte "
                f"private ASNs ({TWO_BYTE_LEAVES} leaves at most)", "asn_plan: auto (4-byte ASNs when needed)")
    for key, message, hint in _size_problems(fabric):
        problem(("fabric", key), message, hint)
    links = spec.links
    if not links.pfc:
        for key in ("pfc_xoff", "pfc_xon", "pfc_watchdog_ms"):
            if getattr(links, key) is not None:
                problem(("links", key), f"{key} needs a lossless fabric", "remove it, or set `pfc: true`")
    if not ecn_on(links):
        for key in ("ecn_kmin", "ecn_kmax", "ecn_pmax"):
            if getattr(links, key) is not None:
                problem(("links", key), f"{key} needs ECN marking", "remove it, or set `ecn: true`")
    # How the queue settings fit each other and the MTU: model/buffers.py (setting_problems), which
    # knows the defaults they are weighed against.
    if spec.routing.flowlet_gap is not None and spec.routing.load_balance != "flowlet":
        problem(("routing", "flowlet_gap"), "flowlet_gap is for `load_balance: flowlet`",
                "remove it, or set `load_balance: flowlet`")
    elif spec.routing.flowlet_gap is not None and parse_time_s(spec.routing.flowlet_gap) <= 0:
        problem(("routing", "flowlet_gap"), "a flowlet gap must be above 0", "e.g. flowlet_gap: 5ms")
    if fabric.dual_plane and fabric.nic_ports != 2:
        problem(("fabric", "dual_plane"), "dual_plane splits the spines between the two ports of dual-port NICs",
                "remove it, or set `nic_ports: 2`")
    if spec.routing.hash_offset and fabric.nic_ports != 1:
        problem(("routing", "hash_offset"), "hash_offset paths start at a NIC's one leaf, and a dual-port NIC's "
                "host picks either port by its own hash", "remove it, or set `nic_ports: 1`")
    if spec.routing.host_routes == "leaf" and fabric.nic_ports != 1:
        problem(("routing", "host_routes"), "a dual-port NIC's address is reachable through two leaves, which "
                "announce it alone, so that either leaf can lose it", "remove it, or set `nic_ports: 1`")
    if spec.runtime not in runtimes:
        problem(("runtime",), f"unknown runtime '{spec.runtime}'",
                f"valid runtimes: {', '.join(runtimes)}")
    return found


def ecn_on(links: LinksSpec) -> bool:
    """Marking is on where the lab says so, and by default on a lossless fabric."""
    return links.pfc if links.ecn is None else links.ecn


# What the twin models on paper (`twin check`, `plan`, `export`): what its address plan can
# number, and at most MAX_NODES nodes and MAX_LINKS links, so that a file within every per-key
# limit cannot make `twin` allocate a fabric of millions of nodes (Baidu's AIPod, 752 nodes and
# 10,240 links, builds in 0.3 s and 88 MB here). Whether one machine runs a lab is for `twin lab
# up` to say, from the machine's memory and cores (lab/capacity.py).
MAX_NODES = 16384
MAX_LINKS = 65536
SWITCH_LINK_31S = 1 << 15  # switch-to-switch links are /31s of 10.0.0.0/16
RAIL_NIC_31S = 1 << 15  # a rail's host links are /31s of 10.<rail>.0.0/16
# Dual-port NICs (model/build.py): a NIC's two leaf ports share a /31 of 10.<rail>.0.0/17 and its
# own address is in 10.<rail>.128.0/17.
RAIL_DUAL_PORT_NICS = 1 << 14


# The 2-byte private ASN plan (RFC 6996, 64512-65534): leaves count up from 64512, superspines
# are 65000 and spine plane r is 65100 + r; past these counts it collides with itself.
TWO_BYTE_LEAVES = 65000 - 64512
TWO_BYTE_PLANES = 65534 - 65100


def fits_two_byte_asns(fabric: FabricSpec) -> bool:
    return fabric.groups * fabric.rails * fabric.nic_ports <= TWO_BYTE_LEAVES and fabric.rails <= TWO_BYTE_PLANES


def fabric_size(fabric: FabricSpec) -> dict[str, int]:
    """Node and link counts of the fabric a spec describes (the wiring rules of docs/formats.md)."""
    leaves = fabric.groups * fabric.rails * fabric.nic_ports
    hosts = fabric.groups * fabric.hosts_per_group
    sides = 2 if fabric.dual_plane else 1  # a leaf reaches its side's spines only
    if fabric.tiers == 2:
        spines, superspines = fabric.spines_per_plane * sides, 0
        switch_links = leaves * fabric.spines_per_plane
    else:
        spines, superspines = fabric.rails * fabric.spines_per_plane * sides, fabric.superspines or 0
        switch_links = leaves * fabric.spines_per_plane + spines * superspines
    return {"nodes": leaves + spines + superspines + hosts, "switch_links": switch_links,
            "links": switch_links + hosts * fabric.rails * fabric.nic_ports}


def _size_problems(fabric: FabricSpec) -> list[tuple[str, str, str]]:
    size, found = fabric_size(fabric), []
    if size["switch_links"] > SWITCH_LINK_31S:
        found.append(("spines_per_plane", f"{size['switch_links']} switch-to-switch links do not fit the address "
                      f"plan ({SWITCH_LINK_31S} /31s in 10.0.0.0/16)", "fewer spines per plane or superspines"))
    # (a rail's dual-port NICs, RAIL_DUAL_PORT_NICS at most, are hosts: MAX_NODES bounds them first)
    if fabric.groups * fabric.hosts_per_group > RAIL_NIC_31S:
        found.append(("hosts_per_group", f"{fabric.groups * fabric.hosts_per_group} NICs on each rail do not fit "
                      f"the address plan ({RAIL_NIC_31S} /31s in each rail's 10.<rail>.0.0/16)",
                      "fewer groups or hosts_per_group"))
    if size["nodes"] > MAX_NODES or size["links"] > MAX_LINKS:
        found.append(("hosts_per_group", f"{size['nodes']} nodes and {size['links']} links: more than the twin "
                      f"models ({MAX_NODES} nodes, {MAX_LINKS} links at most; Baidu's AIPod has 752 and 10,240)",
                      "fewer groups, rails, hosts_per_group or spines"))
    return found


def resolve_lab_path(name_or_path: str, search_dirs: list[Path]) -> Path:
    """A path to a file, or a lab name looked up as <dir>/<name>.yaml."""
    candidate = Path(name_or_path)
    if candidate.suffix in (".yaml", ".yml") or candidate.is_file():
        return candidate
    for directory in search_dirs:
        for suffix in (".yaml", ".yml"):
            path = directory / f"{name_or_path}{suffix}"
            if path.is_file():
                return path
    known = sorted({p.stem for d in search_dirs if d.is_dir() for p in d.glob("*.y*ml")})
    raise TwinError(f"no lab file named '{name_or_path}'",
                    hint=f"known labs: {', '.join(known) or 'none'}; or give a path to a .yaml file")


def load_lab(path: Path, runtimes: list[str], parsed: tuple[dict, SourceMap] | None = None) -> LabFile:
    """Load and validate a lab file (`parsed`: read_yaml's answer for it, where the caller has it
    already); raises LabFileError listing every problem."""
    data, source = parsed or read_yaml(path)
    spec = validate(LabSpec, data, str(path), source)
    lab = LabFile(path=path, spec=spec, source=source)
    problems = _semantic_problems(lab, runtimes)
    if problems:
        raise LabFileError(problems)
    return lab
