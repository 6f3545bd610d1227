"""An adversarial new user: bad and borderline lab and scenario files written to docs/formats.md,
misuses of the commands that need no lab, and results folders a crash damaged. Every case runs
`twin` as a person would (its `main`, with argv, stdin and a working folder of its own), in a
child process forked per case with its memory and CPU capped, and is classified:

    clear       refused (exit 2) with `error:`/a problem naming the file and line or the key, and a hint
                (or accepted, exit 0 or 1, where the case is valid)
    unclear     refused, but without saying where or what to do
    traceback   a Python traceback or an internal error (exit 3)
    wrong       accepted although it cannot work, or refused although it is valid
    slow        over LIMIT_S seconds of CPU or LIMIT_MB of memory (or killed at the caps); CPU time,
                not the clock, so that the other test worker's load cannot make a case slow
    leaked      something was created on the machine: files in the case's folder or run directory
                other than what the case asked for (a lab records itself in its run directory before
                it creates anything, so a namespace or process would show there first; the machine's
                namespaces themselves are not compared: the other test worker creates its own)
    destroyed   something was removed: a file of the case's folder, or of `victim/` beside the run
                directory (where `twin lab down ../victim` once pointed)

tests/unit/test_adversarial.py asserts every case is `clear`; bench/adversarial.py prints the counts.
"""

from __future__ import annotations

import gzip
import importlib
import json
import os
import re
import resource
import shutil
import signal
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LABS_PLACEHOLDER = b"/LABS"  # where the fuzz cases name the shipped labs folder, until their mutations are done
DATA = ROOT / "tests" / "data" / "results"
LIMIT_S = 5.0
LIMIT_MB = 500
CAP_S = 30  # CPU seconds before the child is killed (a hang is then `slow`)
CAP_BYTES = 4 << 30  # address space: a runaway allocation fails instead of swapping the machine

MINI = """name: mini
fabric: {tiers: 2, groups: 2, rails: 1, hosts_per_group: 2, spines_per_plane: 2}
links: {rate: 200mbit, mtu: 9000}
routing: {bfd: {interval_ms: 300, multiplier: 3}, ecmp_hash: l4}
"""
RAIL = """name: railx
fabric: {tiers: 3, groups: 2, rails: 4, hosts_per_group: 2, spines_per_plane: 2, superspines: 2}
"""
SCENARIO = """name: adv
lab: {lab}
duration_s: 30
"""
LINK = "leaf-g1-r1 -- spine-1"


@dataclass
class Case:
    name: str
    argv: list[str]
    files: dict[str, bytes | str] = field(default_factory=dict)
    valid: bool | None = False  # True: must succeed (exit 0, or 1 for a report that did not pass); None: either
    stdin: bytes = b""
    mentions: tuple[str, ...] = ()  # what a clear answer says (e.g. the line: "case.yaml:4")
    setup: str = ""  # a named preparation (a FIFO, a symlink, a results folder)


def _lab(body: str, name: str = "case.yaml") -> Case:
    return Case("", ["check", name], {name: body})


def _scenario(tail: str, lab: str = "mini", head: str = SCENARIO) -> str:
    return head.format(lab=lab) + tail


def lab_cases() -> list[Case]:
    bad = {
        "tiers-string": MINI.replace("tiers: 2", "tiers: '2'"),
        "tiers-4": MINI.replace("tiers: 2", "tiers: 4"),
        "groups-0": MINI.replace("groups: 2", "groups: 0"),
        "groups-65": MINI.replace("groups: 2", "groups: 65"),
        "rails-0": MINI.replace("rails: 1", "rails: 0"),
        "hosts-0": MINI.replace("hosts_per_group: 2", "hosts_per_group: 0"),
        "hosts-huge": MINI.replace("hosts_per_group: 2", "hosts_per_group: 4096").replace("groups: 2", "groups: 64"),
        "spines-0": MINI.replace("spines_per_plane: 2", "spines_per_plane: 0"),
        "2-tier-superspines": MINI.replace("spines_per_plane: 2}", "spines_per_plane: 2, superspines: 2}"),
        "3-tier-no-superspines": MINI.replace("tiers: 2", "tiers: 3"),
        "address-plan": RAIL.replace("spines_per_plane: 2, superspines: 2", "spines_per_plane: 64, superspines: 64")
                            .replace("groups: 2", "groups: 64").replace("rails: 4", "rails: 16"),
        "rate-0": MINI.replace("200mbit", "0mbit"),
        "rate-tbit": MINI.replace("200mbit", "1000gbit"),
        "rate-word": MINI.replace("200mbit", "fast"),
        "mtu-small": MINI.replace("mtu: 9000", "mtu: 100"),
        "mtu-large": MINI.replace("mtu: 9000", "mtu: 65536"),
        "delay-negative": MINI.replace("mtu: 9000}", "mtu: 9000, delay: -1s}"),
        "delay-huge": MINI.replace("mtu: 9000}", "mtu: 9000, delay: 99999999999s}"),
        "pfc-string": MINI.replace("mtu: 9000}", "mtu: 9000, pfc: 'yes'}"),
        "pfc-int": MINI.replace("mtu: 9000}", "mtu: 9000, pfc: 1}"),
        "buffer-2kb": MINI.replace("mtu: 9000}", "mtu: 9000, buffer: 2KB}"),
        "buffer-2gb": MINI.replace("mtu: 9000}", "mtu: 9000, buffer: 2GB}"),
        "buffer-word": MINI.replace("mtu: 9000}", "mtu: 9000, buffer: big}"),
        "xoff-1kb": MINI.replace("mtu: 9000}", "mtu: 9000, pfc_xoff: 1KB}"),
        "xon-500mb": MINI.replace("mtu: 9000}", "mtu: 9000, pfc_xon: 500MB}"),
        "xon-above-xoff": MINI.replace("mtu: 9000}", "mtu: 9000, pfc_xoff: 100KB, pfc_xon: 200KB}"),
        "xon-on-lossy": MINI.replace("mtu: 9000}", "mtu: 9000, pfc: false, pfc_xon: 20KB}"),
        "watchdog-5": MINI.replace("mtu: 9000}", "mtu: 9000, pfc_watchdog_ms: 5}"),
        "watchdog-huge": MINI.replace("mtu: 9000}", "mtu: 9000, pfc_watchdog_ms: 1000000000}"),
        "bfd-0": MINI.replace("interval_ms: 300", "interval_ms: 0"),
        "multiplier-256": MINI.replace("multiplier: 3", "multiplier: 256"),
        "ecmp-l5": MINI.replace("ecmp_hash: l4", "ecmp_hash: l5"),
        "asn-3-byte": MINI.replace("ecmp_hash: l4}", "ecmp_hash: l4, asn_plan: 3-byte}"),
        "runtime-kvm": MINI + "runtime: kvm\n",
        "name-upper": MINI.replace("name: mini", "name: Mini"),
        "name-long": MINI.replace("name: mini", "name: abcdefghijklmn"),
        "name-empty": MINI.replace("name: mini", "name: ''"),
        "name-path": MINI.replace("name: mini", "name: ../x"),
        "name-newline": MINI.replace("name: mini", 'name: "mini\\n"'),
        "fabrik": MINI.replace("fabric:", "fabrik:"),
        "homoglyph-fabric": MINI.replace("fabric:", "f\u0430bric:"),
        "zero-width-key": MINI.replace("links:", "li\u200bnks:"),
        "escape-in-key": MINI + '"\\e[2J\\e[32mOK all files are valid": 1\n',
        "escape-in-value": MINI.replace("ecmp_hash: l4", 'ecmp_hash: "\\e[2Jl4"'),
        "bidi-in-key": MINI + "\u202eevil: 1\n",
        "top-list": "- name: mini\n",
        "scalar": "mini\n",
        "empty": "",
        "comment-only": "# nothing\n",
        "tabs": MINI.replace("links:", "\tlinks:"),
        "duplicate-key": MINI + "name: other\n",
        "deep-flow": "name: x\nfabric: " + "[" * 1500 + "]" * 1500 + "\n",
        "deep-block": "name: x\nfabric:\n" + "".join("  " * i + "- \n" for i in range(1, 700)),
        "deep-map": "name: x\nfabric: " + "{a: " * 900 + "1" + "}" * 900 + "\n",
        "int-5000": MINI.replace("hosts_per_group: 2", "hosts_per_group: " + "9" * 5000),
        "float-huge": MINI.replace("hosts_per_group: 2", "hosts_per_group: 1e999"),
        "inf": MINI.replace("hosts_per_group: 2", "hosts_per_group: .inf"),
        "nan": MINI.replace("hosts_per_group: 2", "hosts_per_group: .nan"),
        "alias-bomb": "name: x\n" + "".join(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9) if i else 'x'}]\n"
                                            for i in range(9)),
        "tag": MINI.replace("name: mini", "name: !!python/object:os.system mini"),
        "two-documents": MINI + "---\n" + MINI,
        "unknown-keys-50000": MINI + "".join(f"k{i}: {i}\n" for i in range(50000)),
        "over-1mib": MINI + "#" * (1 << 20),
        "long-key": MINI + "k" * 900_000 + ": 1\n",
        "long-value": MINI.replace("ecmp_hash: l4", "ecmp_hash: " + "x" * 900_000),
        "nul": MINI + "\x00\n",
        "control": MINI + 'x: "\x07"\n',
    }
    cases = []
    for name, body in bad.items():
        case = _lab(body)
        case.name = f"lab/{name}"
        cases.append(case)
    raw = {"utf16": MINI.encode("utf-16"), "latin1": (MINI + "# caf\xe9\n").encode("latin-1"),
           "random-bytes": bytes(range(256)) * 4}
    for name, body in raw.items():
        cases.append(Case(f"lab/{name}", ["check", "case.yaml"], {"case.yaml": body}))
    fine = {"crlf": MINI.replace("\n", "\r\n"), "utf8-bom": "\ufeff" + MINI, "mini": MINI, "rail": RAIL}
    for name, body in fine.items():
        cases.append(Case(f"lab/ok-{name}", ["check", "case.yaml"], {"case.yaml": body}, valid=True))
    return cases


def _faults(n: int, gap_s: float, length_s: float) -> str:
    return "faults:\n" + "".join(f"  - {{id: f{i}, kind: link_down, link: {LINK}, at_s: {i * gap_s:g}, "
                                 f"duration_s: {length_s:g}}}\n" for i in range(n))


def scenario_cases() -> list[Case]:
    s = _scenario
    bad = {
        "name-upper": SCENARIO.replace("name: adv", "name: ADV").format(lab="mini"),
        "no-lab": "name: adv\nduration_s: 10\n",
        "lab-proc-mem": s("", lab="/proc/self/mem"),
        "lab-kmsg": s("", lab="/proc/kmsg"),
        "lab-dev-zero": s("", lab="/dev/zero"),
        "lab-fifo": s("", lab="fifo.yaml"),
        "lab-pagemap-link": s("", lab="pagemap.yaml"),
        "lab-dir": s("", lab="adir.yaml"),
        "lab-missing": s("", lab="nowhere.yaml"),
        "lab-name-unknown": s("", lab="nosuchlab"),
        "lab-traversal-name": s("", lab="../../../etc/passwd"),
        "duration-0": s("").replace("duration_s: 30", "duration_s: 0"),
        "duration-negative": s("").replace("duration_s: 30", "duration_s: -5"),
        "duration-long": s("").replace("duration_s: 30", "duration_s: 3601"),
        "duration-inf": s("").replace("duration_s: 30", "duration_s: .inf"),
        "duration-string": s("").replace("duration_s: 30", "duration_s: '30'"),
        "seed-negative": s("seed: -1\n"),
        "seed-2-70": s(f"seed: {2**70}\n"),
        "seed-2-32": s(f"seed: {2**32}\n"),
        "telemetry-negative": s("telemetry_ms: -1\n"),
        "workloads-not-list": s("workloads: {kind: flows}\n"),
        "workload-no-kind": s("workloads:\n  - size: 8MiB\n"),
        "workload-unknown": s("workloads:\n  - kind: allreduse\n"),
        "size-0": s("workloads:\n  - kind: allreduce\n    size: 0B\n"),
        "size-1tb": s("workloads:\n  - kind: allreduce\n    size: 1TB\n"),
        "size-negative": s("workloads:\n  - kind: allreduce\n    size: -1MiB\n"),
        "ranks-twice": s("workloads:\n  - kind: allreduce\n    ranks: [host-g1-h1:nic1, host-g1-h1:nic1]\n"),
        "ranks-rail-9": s("workloads:\n  - kind: allreduce\n    ranks: rail:9\n"),
        "ranks-unknown-host": s("workloads:\n  - kind: allreduce\n    ranks: hosts:host-g9-h9\n"),
        "channels-0": s("workloads:\n  - kind: allreduce\n    channels: 0\n"),
        "timeout-0": s("workloads:\n  - kind: allreduce\n    timeout_s: 0\n"),
        "transport-udp": s("workloads:\n  - kind: allreduce\n    transport: udp\n"),
        "roce-key-on-tcp": s("workloads:\n  - kind: allreduce\n    retry_cnt: 3\n"),
        "probes-1ms": s("workloads:\n  - kind: probes\n    interval_ms: 1\n"),
        "probes-full-big": s("workloads:\n  - kind: probes\n    pairs: full\n    interval_ms: 10000\n"
                             "    max_pps: 100000\n", lab="big.yaml"),
        "probes-rtt-0": s("workloads:\n  - kind: probes\n    rtt_every: 0\n"),
        "flows-pps-huge": s("workloads:\n  - kind: flows\n    pps: 1000000000\n"),
        "faults-not-list": s("faults: {id: x}\n"),
        "overlap-300": s(_faults(300, 0.01, 5)),
        "overlap-3000": s(_faults(3000, 0.001, 5)),
        "fault-kind-unknown": s(f"faults:\n  - {{id: a, kind: link_dwn, link: {LINK}}}\n"),
        "fault-kind-homoglyph": s(f"faults:\n  - {{id: a, kind: l\u0456nk_down, link: {LINK}}}\n"),
        "fault-no-link": s("faults:\n  - {id: a, kind: link_down}\n"),
        "fault-link-unknown": s("faults:\n  - {id: a, kind: link_down, link: leaf-9 -- spine-9}\n"),
        "fault-link-self": s("faults:\n  - {id: a, kind: link_down, link: spine-1 -- spine-1}\n"),
        "fault-link-not-adjacent": s("faults:\n  - {id: a, kind: link_down, link: spine-1 -- spine-2}\n"),
        "fault-direction": s(f"faults:\n  - {{id: a, kind: silent_drop, link: {LINK}, loss_pct: 5, direction: up}}\n"),
        "link-down-one-way": s(f"faults:\n  - {{id: a, kind: link_down, link: {LINK}, direction: a_to_b}}\n"),
        "loss-0": s(f"faults:\n  - {{id: a, kind: silent_drop, link: {LINK}, loss_pct: 0}}\n"),
        "loss-101": s(f"faults:\n  - {{id: a, kind: silent_drop, link: {LINK}, loss_pct: 101}}\n"),
        "loss-tiny": s(f"faults:\n  - {{id: a, kind: silent_drop, link: {LINK}, loss_pct: 0.00001}}\n"),
        "bitflip-min-size": s(f"faults:\n  - {{id: a, kind: bitflip, link: {LINK}, rate_pct: 5, min_size: 20000}}\n"),
        "flap-period": s(f"faults:\n  - {{id: a, kind: flap, link: {LINK}, period_s: 20, at_s: 1, duration_s: 5}}\n"),
        "flap-count": s(f"faults:\n  - {{id: a, kind: flap, link: {LINK}, period_s: 2, count: 50}}\n"),
        "fault-1us": s(f"faults:\n  - {{id: a, kind: link_down, link: {LINK}, at_s: 1, duration_s: 0.000001}}\n"),
        "fault-at-negative": s(f"faults:\n  - {{id: a, kind: link_down, link: {LINK}, at_s: -1}}\n"),
        "fault-after-end": s(f"faults:\n  - {{id: a, kind: link_down, link: {LINK}, at_s: 40}}\n"),
        "fault-past-end": s(f"faults:\n  - {{id: a, kind: link_down, link: {LINK}, at_s: 20, duration_s: 20}}\n"),
        "switch-down-host": s("faults:\n  - {id: a, kind: switch_down, node: host-g1-h1}\n"),
        "switch-down-over-link": s(f"faults:\n  - {{id: a, kind: link_down, link: {LINK}, at_s: 1, duration_s: 10}}\n"
                                   "  - {id: b, kind: switch_down, node: spine-1, at_s: 5, duration_s: 5}\n"),
        "blackhole-prefix": s("faults:\n  - {id: a, kind: blackhole, node: spine-1, prefix: 10.2.0.6/33}\n"),
        "blackhole-foreign": s("faults:\n  - {id: a, kind: blackhole, node: spine-1, prefix: 192.168.0.0/24}\n"),
        "slow-node-100": s("faults:\n  - {id: a, kind: slow_node, node: host-g1-h1, rate_pct: 100}\n"),
        "pause-inf": s(f"faults:\n  - {{id: a, kind: pfc_pause, link: {LINK}, pause_ms: .inf}}\n"),
        "pause-huge": s(f"faults:\n  - {{id: a, kind: pfc_pause, link: {LINK}, pause_ms: 1e300}}\n"),
        "pause-period": s(f"faults:\n  - {{id: a, kind: pfc_pause, link: {LINK}, pause_ms: 100, period_ms: 50}}\n"),
        "storm-no-nic": s("faults:\n  - {id: a, kind: pfc_storm, node: host-g1-h1}\n"),
        "bgp-down-host-link": s("faults:\n  - {id: a, kind: bgp_down, link: leaf-g1-r1 -- host-g1-h1}\n"),
        "fault-id-twice": s(f"faults:\n  - {{id: a, kind: link_down, link: {LINK}, at_s: 1, duration_s: 1}}\n"
                            f"  - {{id: a, kind: link_down, link: {LINK}, at_s: 5, duration_s: 1}}\n"),
        "fault-id-path": s(f"faults:\n  - {{id: ../x, kind: link_down, link: {LINK}}}\n"),
        "fault-id-escape": s(f"faults:\n  - {{id: \"\\e[2J\", kind: link_down, link: {LINK}}}\n"),
        "fault-key-homoglyph": s(f"faults:\n  - {{id: a, kind: link_down, l\u0456nk: {LINK}}}\n"),
        "detector-unknown": s("workloads:\n  - kind: probes\ndetectors:\n  - builtin: probe-localiser\n"),
        "detector-both": s("detectors:\n  - {builtin: probe-localizer, command: [ls]}\n"),
        "detector-no-command": s("detectors:\n  - command: [no-such-tool-x]\n"),
        "detector-name-path": s("detectors:\n  - {command: [ls], name: ../../x}\n"),
        "detector-same-names": s("detectors:\n  - {command: [ls], name: a}\n  - {command: [true], name: a}\n"),
        "detector-needs-probes": s("detectors:\n  - builtin: probe-localizer\n"),
        "expect-unknown": s("expect:\n  - detcet: {fault: a, within_s: 1}\n"),
        "expect-fault-unknown": s("expect:\n  - detect: {fault: nope, within_s: 1}\n"),
        "expect-slowdown-half": s("workloads:\n  - kind: allreduce\nexpect:\n  - collective: {max_slowdown: 0.5}\n"),
        "expect-min-over-max": s("workloads:\n  - kind: allreduce\nexpect:\n"
                                 "  - collective: {max_slowdown: 1.5, min_slowdown: 2}\n"),
        "expect-within-0": s(f"faults:\n  - {{id: a, kind: link_down, link: {LINK}}}\n"
                             "expect:\n  - reroute: {fault: a, within_s: 0}\n"),
        "expect-hang-cause": s("workloads:\n  - kind: allreduce\n"
                               "expect:\n  - hang: {workload: allreduce-0, cause: bug}\n"),
        "expect-wrong-negative": s("expect:\n  - max_wrong_verdicts: -1\n"),
        "expect-no-hang-string": s("expect:\n  - no_hang: 'yes'\n"),
        "scenario-typo-top": s("wrokloads: []\n"),
    }
    cases = [Case(f"scenario/{name}", ["check", "case.yaml"], {"case.yaml": body}) for name, body in bad.items()]
    for case in cases:
        if "big.yaml" in case.files["case.yaml"]:
            case.files["big.yaml"] = RAIL.replace("hosts_per_group: 2", "hosts_per_group: 12").replace(
                "name: railx", "name: big").replace("groups: 2", "groups: 8").replace("rails: 4", "rails: 8")
    cases[[c.name for c in cases].index("scenario/lab-fifo")].setup = "fifo"
    cases[[c.name for c in cases].index("scenario/lab-pagemap-link")].setup = "pagemap"
    cases[[c.name for c in cases].index("scenario/lab-dir")].setup = "dir"
    valid = {
        "sequential-11000": s(_faults(11000, 0.3, 0.2)).replace("duration_s: 30", "duration_s: 3400"),
        "shipped-mini": s(f"faults:\n  - {{id: a, kind: link_down, link: {LINK}, at_s: 1, duration_s: 5}}\n"),
        "two-switches-down": s("faults:\n  - {id: a, kind: switch_down, node: spine-1, at_s: 1, duration_s: 5}\n"
                               "  - {id: b, kind: switch_down, node: leaf-g1-r1, at_s: 2, duration_s: 5}\n"),
    }
    cases += [Case(f"scenario/ok-{name}", ["check", "case.yaml"], {"case.yaml": body}, valid=True)
              for name, body in valid.items()]
    # A bare lab file name is found beside the scenario, not in the folder `twin` runs in.
    cases.append(Case("scenario/ok-lab-beside-it", ["check", "sub/case.yaml"],
                      {"sub/case.yaml": s("", lab="other.yaml"), "sub/other.yaml": MINI.replace("mini", "other")},
                      valid=True))
    return cases


def command_cases() -> list[Case]:
    # {scratch}: the case's scratch folder, so an absolute path points at the victim, never elsewhere.
    traversal = ["../victim", "../victim/", "", ".", "..", "mini/../../victim", "a\x1b[2Jb", "-x",
                 "{scratch}/victim"]
    cases = []
    for number, name in enumerate(traversal):
        cases.append(Case(f"command/lab-down-{number}", ["lab", "down", name]))
        cases.append(Case(f"command/lab-status-{number}", ["lab", "status", name]))
        cases.append(Case(f"command/fault-list-{number}", ["fault", "list", name]))
    cases += [
        Case("command/fault-inject-traversal", ["fault", "inject", "../victim", "link_down", "--link", LINK]),
        Case("command/fault-clear-traversal", ["fault", "clear", "{scratch}/victim", "x"]),
        Case("command/lab-exec-traversal", ["lab", "exec", "../victim", "spine-1", "--", "true"]),
        Case("command/drain-traversal", ["lab", "drain", "..", LINK]),
        Case("command/telemetry-traversal", ["telemetry", "../victim", "--duration", "1"]),
        Case("command/probe-traversal", ["probe", "../victim", "--duration", "1"]),
        Case("command/dashboard-traversal", ["dashboard", "../victim"]),
        Case("command/train-scores-traversal", ["train", "scores", "--trainee", "../../x"]),
        Case("command/train-hint-traversal", ["train", "hint", "--lab", "../victim"]),
        Case("command/fault-inject-alias",
             ["fault", "inject", "mini", "silent_drop", "--link", LINK, "-p", "loss_pct=*a"]),
        Case("command/fault-inject-tag", ["fault", "inject", "mini", "silent_drop", "--link", LINK, "-p",
                                          "loss_pct=!!python/object/apply:os.system [true]"]),
        Case("command/fault-inject-syntax",
             ["fault", "inject", "mini", "silent_drop", "--link", LINK, "-p", "loss_pct=[1"]),
        Case("command/fault-inject-not-finite",
             ["fault", "inject", "mini", "silent_drop", "--link", LINK, "-p", "loss_pct=1e400"]),
        Case("command/fault-inject-no-equals", ["fault", "inject", "mini", "silent_drop", "-p", "loss_pct"]),
        Case("command/schema-unwritable", ["schema", "lab", "-o", "{scratch}/missing/dir/lab.json"]),
        Case("command/schema-into-proc", ["schema", "lab", "-o", "/proc/version"]),
        Case("command/graph-unwritable", ["lab", "graph", "mini", "-o", "{scratch}/missing/dir/mini.png"]),
        Case("command/graph-format", ["lab", "graph", "mini", "-o", "mini.gif"]),
        Case("command/export-unwritable", ["export", "mini", "--out", "/proc/x"]),
        Case("command/export-into-folder-of-others", ["export", "mini", "--out", "others"],
             {"others/keep.txt": "mine"}),
        Case("command/export-onto-file", ["export", "mini", "--out", "afile"], {"afile": "x"}),
        Case("command/export-addresses", ["export", "mini", "--out", "o", "--hosts", "2", "--address", "1.2.3"]),
        Case("command/plan-too-many", ["plan", "mini", "--hosts", "60"]),
        Case("command/show-not-a-lab", ["lab", "show", "../../etc/passwd"]),
        Case("command/up-missing-file", ["lab", "up", "../nowhere.yaml"]),
        Case("command/run-bad-scenario", ["run", "case.yaml"], {"case.yaml": _scenario("seed: -1\n")}),
        Case("command/e2e-unknown", ["e2e", "no-such-scenario"]),
        Case("command/report-not-results", ["report", "."]),
        Case("command/report-a-file", ["report", "afile"], {"afile": "x"}),
        Case("command/replay-not-results", ["detect", "replay", "."]),
        Case("command/check-none", ["check", "nowhere.yaml"]),
        Case("command/check-stdin-bad", ["check", "-"], stdin=MINI.replace("tiers: 2", "tiers: 9").encode()),
        Case("command/check-several", ["check", "a.yaml", "b.yaml", "c.yaml"],
             {"a.yaml": MINI, "b.yaml": "name: x\nfabric: " + "[" * 900 + "\n", "c.yaml": MINI.replace("2}", "0}")},
             mentions=("a.yaml", "b.yaml", "c.yaml")),
        Case("command/check-several-json", ["check", "--json", "a.yaml", "b.yaml"],
             {"a.yaml": MINI, "b.yaml": "x: " + "9" * 5000 + "\n"}, mentions=('"file": "a.yaml"', '"file": "b.yaml"')),
        Case("command/unknown-command-escape", ["\x1b[2Jsneaky"]),
        Case("command/bad-option", ["lab", "status", "--idle-window", "nan", "mini"]),
    ]
    cases.append(Case("command/ok-check-stdin", ["check", "-"], stdin=MINI.encode(), valid=True))
    cases.append(Case("command/ok-schema", ["schema", "scenario", "-o", "s.json"], valid=True))
    cases.append(Case("command/ok-export", ["export", "mini", "--out", "clab"], valid=True))
    return cases


# Commands whose bare form acts on the machine: never run here without a bad argument.
ACTS_WHEN_BARE = {("cleanup",), ("e2e",), ("train", "start")}
NEVER_RUN = {("cleanup",)}  # removes every lab of the machine: its own tests run it alone


def every_command_cases() -> list[Case]:
    """Every command of `twin`, read from the CLI itself: its help, and bad arguments (a path where
    a name belongs in every argument and required option, an unknown option, nothing at all)."""
    import click

    from twin.cli import cli

    def leaves(command, path):
        if isinstance(command, click.Group):  # asked, not read: `twin` loads its commands when asked
            context = click.Context(command)
            for name in command.list_commands(context):
                yield from leaves(command.get_command(context, name), path + (name,))
        else:
            yield path, command

    cases = []
    for path, command in leaves(cli, ()):
        if path in NEVER_RUN:
            continue
        label = "-".join(path)
        arguments = [p for p in command.params if isinstance(p, click.Argument)]
        required = [p for p in command.params if isinstance(p, click.Option) and p.required]
        bad = [*path, *("../x" for _ in arguments)] + [arg for option in required for arg in (option.opts[0], "../x")]
        if path == ("train", "start"):
            bad = [*path, "--lab", "../x"]
        cases.append(Case(f"every/{label}-help", [*path, "--help"], valid=True))
        cases.append(Case(f"every/{label}-unknown-option", [*path, "--bogus-option"]))
        if len(bad) > len(path):
            cases.append(Case(f"every/{label}-paths", bad))
        if path not in ACTS_WHEN_BARE:
            cases.append(Case(f"every/{label}-bare", list(path), valid=None if not (arguments or required) else False))
    return cases


def results_cases() -> list[Case]:
    cases = []
    for damage in ("cut-last-line", "garbage-line", "not-an-object", "empty-run-json", "cut-model",
                   "cut-run-json-no-report"):
        valid = damage not in ("cut-run-json-no-report", "empty-run-json")
        cases.append(Case(f"results/{damage}", ["report", "run"], setup=f"results:replay-drop:{damage}",
                          valid=valid, mentions=("damaged:",) if valid else ()))
    for damage in ("cut-last-line", "cut-report"):
        valid = damage == "cut-last-line"
        cases.append(Case(f"results/legacy-{damage}", ["report", "run"], setup=f"results:silent-drop:{damage}",
                          valid=valid, mentions=("damaged:",) if valid else ()))
    cases.append(Case("results/replay-cut", ["detect", "replay", "run"], setup="results:replay-drop:cut-last-line",
                      valid=True))
    return cases


def all_cases() -> list[Case]:
    return lab_cases() + scenario_cases() + command_cases() + every_command_cases() + results_cases()


def mutated_cases(count: int, seed: int) -> list[Case]:
    """A seeded generator of damaged shipped files: bytes cut, doubled, replaced or inserted (YAML
    punctuation, control and look-alike characters, long runs, deep brackets) where any byte may
    land. Valid or not, each must get a clear answer."""
    import random
    rng = random.Random(seed)
    sources = sorted((ROOT / "scenarios").glob("*.yaml")) + sorted((ROOT / "labs").glob("*.yaml"))
    pieces = [b":", b"- ", b"[", b"{", b"]", b"}", b"&a ", b"*a", b"!!str ", b"\n  ", b"\t", b"'", b'"', b"#",
              b"\x1b[2J", "\u200b".encode(), "\u0430".encode(), b"\x00", b"\xff", b"9" * 40, b"[" * 200,
              b"-1", b".inf", b"1e999", b"0x", b"---\n", b"? ", b"<<: ", b"\r"]
    cases = []
    for number in range(count):
        source = rng.choice(sources)
        raw = source.read_bytes()
        if source.parent.name == "scenarios":  # its lab by absolute path: the case runs in a folder of its own
            raw = raw.replace(b"\nlab: ", b"\nlab: " + LABS_PLACEHOLDER + b"/", 1)
            raw = re.sub(rb"(lab: \S+/)([a-z0-9-]+)\n", rb"\1\2.yaml\n", raw, count=1)
        for _ in range(rng.randint(1, 4)):
            at = rng.randrange(len(raw) + 1)
            action = rng.choice(["cut", "insert", "replace", "double"])
            if action == "cut":
                raw = raw[:at] + raw[at + rng.randint(1, 20):]
            elif action == "insert":
                raw = raw[:at] + rng.choice(pieces) + raw[at:]
            elif action == "replace":
                raw = raw[:at] + rng.choice(pieces) + raw[at + rng.randint(1, 8):]
            else:
                raw = raw[:at] + raw[at:at + rng.randint(1, 60)] * rng.randint(2, 50) + raw[at:]
        # The labs' folder is put in after the mutations: they (and so the cases) are the same in
        # every clone, whatever the length of its path.
        raw = raw.replace(LABS_PLACEHOLDER, str(ROOT / "labs").encode())
        cases.append(Case(f"fuzz/{number}-{source.stem}", ["check", "case.yaml"], {"case.yaml": raw}, valid=None))
    return cases


# --- running a case ---------------------------------------------------------------------------

@dataclass
class Outcome:
    case: Case
    exit: int | None
    output: str
    seconds: float
    max_rss_mb: float
    created: list[str]
    removed: list[str]
    cpu_s: float = 0.0
    verdict: str = ""
    why: str = ""


def _prepare(case: Case, folder: Path) -> None:
    for name, content in case.files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content.encode() if isinstance(content, str) else content)
    if case.setup == "fifo":
        os.mkfifo(folder / "fifo.yaml")
    elif case.setup == "pagemap":
        (folder / "pagemap.yaml").symlink_to("/proc/self/pagemap")
    elif case.setup == "dir":
        (folder / "adir.yaml").mkdir()
    elif case.setup.startswith("results:"):
        _, source, damage = case.setup.split(":")
        _damaged_results(DATA / source, folder / "run", damage)


def _damaged_results(source: Path, target: Path, damage: str) -> None:
    target.mkdir()
    for path in source.iterdir():
        if path.suffix == ".gz":
            (target / path.stem).write_bytes(gzip.decompress(path.read_bytes()))
        else:
            shutil.copy(path, target / path.name)
    events = target / "events.jsonl"
    text = events.read_bytes()
    if damage == "cut-last-line":
        events.write_bytes(text.rstrip(b"\n")[:-7])
    elif damage == "garbage-line":
        lines = text.split(b"\n")
        events.write_bytes(b"\n".join(lines[:5] + [b"\x00\xff garbage {"] + lines[5:]))
    elif damage == "not-an-object":
        events.write_bytes(text + b"[1, 2]\n{\"t\": 1}\n")
    elif damage == "empty-run-json":
        (target / "run.json").write_bytes(b"")
        (target / "report.json").write_text(json.dumps({"scenario": "x"}))  # no plan in it either
    elif damage == "cut-run-json-no-report":
        (target / "run.json").write_bytes((target / "run.json").read_bytes()[:40])
    elif damage == "cut-model":
        (target / "model.json").write_bytes((target / "model.json").read_bytes()[:100])
    elif damage == "cut-report":
        (target / "report.json").write_bytes((target / "report.json").read_bytes()[:200])


def _listing(*roots: Path) -> set[str]:
    return {str(p) for root in roots if root.exists() for p in root.rglob("*")}


def _child(case: Case, folder: Path, run_dir: Path, output: Path) -> None:
    """In the forked child: caps, a working folder, argv, then `twin`'s own main."""
    resource.setrlimit(resource.RLIMIT_AS, (CAP_BYTES, CAP_BYTES))
    resource.setrlimit(resource.RLIMIT_CPU, (CAP_S, CAP_S + 1))
    os.chdir(folder)
    os.environ["FABRIC_TWIN_RUN_DIR"] = str(run_dir)
    os.environ["COLUMNS"] = "200"
    stdin = folder / ".stdin"
    stdin.write_bytes(case.stdin)
    fd_in, fd_out = os.open(stdin, os.O_RDONLY), os.open(output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(fd_in, 0)
    os.dup2(fd_out, 1)
    os.dup2(fd_out, 2)
    stdin.unlink()
    # Python's own streams over the new descriptors (a test runner may have replaced them).
    sys.stdin = open(0, closefd=False)
    sys.stdout = open(1, "w", closefd=False)
    sys.stderr = open(2, "w", closefd=False)
    sys.argv = ["twin", *(arg.replace("{scratch}", str(folder.parent)) for arg in case.argv)]
    code = 0
    try:
        from twin.cli import main
        main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    except BaseException:  # noqa: BLE001 (reported as the traceback it is)
        import traceback
        traceback.print_exc()
        code = 99
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def run_case(case: Case, scratch: Path) -> Outcome:
    folder, run_dir, output = scratch / "case", scratch / "run", scratch / "output.txt"
    victim = scratch / "victim"
    for path in (folder, run_dir, victim):
        shutil.rmtree(path, ignore_errors=True)
    folder.mkdir(parents=True)
    run_dir.mkdir()
    victim.mkdir()
    (victim / "keep").write_text("not the lab's")
    _prepare(case, folder)
    before = _listing(folder, run_dir, victim)
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:
        _child(case, folder, run_dir, output)
    deadline, status, usage = started + CAP_S * 2, None, None
    while status is None:
        done, status_, usage_ = os.wait4(pid, os.WNOHANG)
        if done:
            status, usage = status_, usage_
        elif time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
        else:
            time.sleep(0.01)
    seconds = time.monotonic() - started
    code = os.waitstatus_to_exitcode(status)
    after = _listing(folder, run_dir, victim)
    created = sorted(p.removeprefix(str(scratch) + "/") for p in after - before)
    removed = sorted(p.removeprefix(str(scratch) + "/") for p in before - after)
    text = output.read_text(errors="replace") if output.exists() else ""
    outcome = Outcome(case, code, text, seconds, usage.ru_maxrss / 1024, created, removed,
                      cpu_s=usage.ru_utime + usage.ru_stime)
    outcome.verdict, outcome.why = classify(outcome)
    return outcome


ALLOWED_OUTPUTS = {"command/ok-schema": ("case/s.json",), "command/ok-export": ("case/clab",),
                   "results": ("case/run/",)}


def classify(o: Outcome) -> tuple[str, str]:
    name, text = o.case.name, o.output
    if "Traceback (most recent call last)" in text or o.exit in (3, 99):
        return "traceback", text.strip().splitlines()[-1] if text.strip() else f"exit {o.exit}"
    if o.exit is None or o.exit < 0:
        return "slow", f"killed (exit {o.exit}) after {o.seconds:.1f} s"
    if o.cpu_s > LIMIT_S or o.max_rss_mb > LIMIT_MB:
        return "slow", f"{o.cpu_s:.1f} s of CPU ({o.seconds:.1f} s), {o.max_rss_mb:.0f} MB"
    if o.removed:
        return "destroyed", ", ".join(o.removed[:3])
    allowed = ALLOWED_OUTPUTS.get(name, ()) + ALLOWED_OUTPUTS.get(name.split("/")[0], ())
    leaked = [p for p in o.created if not any(p.startswith(a) for a in allowed)]
    if leaked:
        return "leaked", ", ".join(leaked[:3])
    if o.case.valid:
        missing = [m for m in o.case.mentions if m not in text]
        if o.exit in (0, 1) and missing:
            return "unclear", f"does not mention {missing}"
        if o.exit in (0, 1):
            return "clear", ""
        return "wrong", f"refused a valid case (exit {o.exit}): {_last(text)}"
    if o.exit == 0:
        return ("clear", "") if o.case.valid is None else ("wrong", f"accepted: {_last(text)}")
    if o.exit != 2:
        return "unclear", f"exit {o.exit}: {_last(text)}"
    if "\x1b" in text:
        return "unclear", "the output carries a raw escape character"
    missing = [m for m in o.case.mentions if m not in text]
    if missing:
        return "unclear", f"does not mention {missing}"
    if "--json" in o.case.argv:
        try:
            answers = json.loads(text)
        except ValueError:
            return "unclear", "--json printed something that is not JSON"
        problems = [p for a in answers for p in a["problems"]]
        if not problems or not all(p["hint"] and (p["line"] or p["key"]) for p in problems):
            return "unclear", "a problem without a hint, a line or a key"
        return "clear", ""
    if "Usage:" in text and "Error:" in text:  # click's own answer to a misused command line
        return "clear", ""
    if o.case.argv[0] == "check":  # a file's problems: each line names the file (and its line), then a hint
        problems = [line for line in text.splitlines() if line.startswith("  ") and not line.startswith("  hint:")]
        located = re.compile(r"  (\S+?(:\d+)?: |\.\.\. and \d+ more)")  # a file (and line), or the cap's note
        if not problems or not all(located.match(line) for line in problems) or "hint:" not in text:
            return "unclear", f"a problem that names no file, or no hint: {_last(text)}"
        return "clear", ""
    if "error:" in text and "hint:" in text:
        return "clear", ""
    return "unclear", f"no error and hint: {_last(text)}"


def _last(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:200] if lines else "(no output)"


def run_all(cases: list[Case], scratch: Path) -> list[Outcome]:
    # Every command's module imported once, before the forks (`twin` imports a command's module when
    # it runs): each case then starts at once, and its CPU time is the command's, not the imports'.
    from twin.cli import COMMANDS
    for where in COMMANDS.values():
        importlib.import_module(where.split(":")[0])
    return [run_case(case, scratch) for case in cases]


def counts(outcomes: list[Outcome]) -> Counter:
    return Counter(o.verdict for o in outcomes)
