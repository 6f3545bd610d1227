"""Results folder of a run: report.json, junit.xml, timeline.png, topology.png. Reads only the
event records; every figure it states is measured from them."""

from __future__ import annotations

import json
import platform
from dataclasses import asdict
from pathlib import Path
from xml.etree import ElementTree as ET

from twin.results import grading, workloads as workload_report
from twin.detect.verdicts import link_key
from twin.run.runner import SCHEDULE_TOLERANCE_S, RunResult
from twin.workloads.flows import WARMUP_S

RESTORE_WINDOW_S = 10.0  # route changes this long after a clear count as its restoration


def _window(timing, duration_s):
    start = timing.applied_s if timing.applied_s is not None else timing.scheduled_s
    end = timing.cleared_s if timing.cleared_s is not None else duration_s
    return start, end


def _overlaps(record, start, end) -> bool:
    """An interval record [t, t + span_s) overlaps [start, end)."""
    return record["t"] + record.get("span_s", 0.0) > start and record["t"] < end


def _flow_stats(records, start, end):
    inside = [r for r in records if _overlaps(r, start, end)]
    sent = sum(r["sent"] for r in inside)
    received = sum(r["received"] for r in inside)
    return {"intervals": len(inside), "sent": sent, "received": received,
            "loss_pct": round(100.0 * (sent - received) / sent, 3) if sent else None,
            "max_delay_ms": max((r["max_delay_ms"] for r in inside), default=None)}


def _recovered_after(records, start, end):
    """Seconds from onset to the start of the last loss-free stretch inside the window."""
    by_t = {}
    for r in records:
        if _overlaps(r, start, end):
            by_t.setdefault(r["t"], []).append(r)
    lossy = [t for t, rows in by_t.items() if any(r["loss_pct"] > 0 for r in rows)]
    if not lossy:
        return 0.0
    later = [t for t in sorted(by_t) if t > max(lossy)]
    return round(later[0] - start, 3) if later else None


def analyse(result: RunResult) -> dict:
    records = result.events.records
    duration = result.scenario.spec.duration_s
    flows = [r for r in records if r["kind"] == "flow"]
    windows = [_window(t, duration) for t in result.faults]
    baseline = [r for r in flows if r["t"] >= WARMUP_S and not any(_overlaps(r, s, e + 2) for s, e in windows)]
    faults = []
    for timing, (start, end) in zip(result.faults, windows):
        routing = [r for r in records if r["kind"] in ("route", "bgp", "bfd") and start <= r["t"] < end]
        routes = [r for r in routing if r["kind"] == "route"]
        restores = [r for r in records if r["kind"] == "route" and end <= r["t"] <= end + RESTORE_WINDOW_S]
        error_s = None if timing.applied_s is None else round(timing.applied_s - timing.scheduled_s, 4)
        faults.append(asdict(timing) | {
            "schedule_error_s": error_s,
            "on_schedule": error_s is not None and abs(error_s) <= SCHEDULE_TOLERANCE_S and timing.error is None,
            "flows": _flow_stats(flows, start, end),
            "flows_recovered_after_s": _recovered_after(flows, start, end) if flows else None,
            "route_changes": len(routes),
            "first_route_change_s": round(routes[0]["t"] - start, 3) if routes else None,
            "last_route_change_s": round(routes[-1]["t"] - start, 3) if routes else None,
            "restore_route_changes": len(restores),
            "restored_after_s": round(restores[-1]["t"] - end, 3) if restores else None,
            "bgp_downs": sum(1 for r in routing if r["kind"] == "bgp" and r["state"] == "down"),
            "bfd_downs": sum(1 for r in routing if r["kind"] == "bfd" and r["state"] == "down"),
            "first_bfd_down_s": next((round(r["t"] - start, 3) for r in routing
                                      if r["kind"] == "bfd" and r["state"] == "down"), None),
        })
    return {
        "scenario": result.scenario.spec.name, "scenario_file": str(result.scenario.path),
        "lab": result.scenario.fabric.name, "seed": result.scenario.spec.seed,
        "started_utc": result.started_utc, "duration_s": duration, "interrupted": result.interrupted,
        "machine": f"{platform.node()} {platform.release()}",
        "baseline_flows": _flow_stats(baseline, 0, float("inf")),
        "faults": faults,
        "collectives": workload_report.collectives(records, windows),
        "probes": workload_report.probes(records, windows),
        "telemetry": next((r["stats"] for r in records if r["kind"] == "telemetry"), None),
        "mitigation": workload_report.mitigation(records),
        "fabric": workload_report.fabric(records, windows, result.scenario.fabric.pfc),
        "expectations": [],  # graded below, from everything above
        "transport_note": "flows and probes are UDP; collectives say their transport: tcp is gloo over TCP "
                          "(selective retransmission: loss costs little), roce the emulated RoCE RC transport "
                          "(go-back-N, NCCL's timers; user space over UDP, this kernel has no RDMA)",
        "fabric_note": ("lossless: a full queue pauses its senders (PFC emulated on the kernel's queues)"
                        if result.scenario.fabric.pfc else "lossy (links.pfc: false): a full queue drops"),
    }


def grade(result: RunResult, report: dict) -> dict:
    targets = {f.timing.id: f.targets for f in result.scenario.faults}
    report["detectors"] = grading.detectors(result.events.records, report["faults"], targets, report["duration_s"])
    report["expectations"] = grading.grade(result.scenario.expectations, report, result.events.records, targets)
    report["passed"] = all(e["status"] == "pass" for e in report["expectations"]) and \
        all(f["on_schedule"] for f in report["faults"])
    return report


def write_junit(report: dict, path: Path) -> None:
    suite = ET.Element("testsuite", name=f"fabric-twin.{report['scenario']}")
    cases = 0
    failures = 0
    for fault in report["faults"]:
        case = ET.SubElement(suite, "testcase", classname=report["scenario"],
                             name=f"fault {fault['id']} ({fault['kind']}) applied on schedule")
        cases += 1
        if not fault["on_schedule"]:
            failures += 1
            ET.SubElement(case, "failure", message=(
                fault["error"] or f"applied {fault['schedule_error_s']} s off schedule "
                f"(tolerance {SCHEDULE_TOLERANCE_S} s)"))
    for expectation in report["expectations"]:
        case = ET.SubElement(suite, "testcase", classname=report["scenario"],
                             name=f"expect {json.dumps(expectation['expect'])}")
        cases += 1
        if expectation["status"] != "pass":
            failures += 1
            ET.SubElement(case, "failure", message=f"measured {expectation['measured']}, limit "
                          f"{expectation['limit']}: {expectation['message']}")
    suite.set("tests", str(cases))
    suite.set("failures", str(failures))
    ET.ElementTree(suite).write(path, encoding="utf-8", xml_declaration=True)


def write_timeline(result: RunResult, report: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = result.events.records
    flows = [r for r in records if r["kind"] == "flow"]
    times = sorted({r["t"] for r in flows})
    loss = [sum(r["sent"] - r["received"] for r in flows if r["t"] == t)
            / max(1, sum(r["sent"] for r in flows if r["t"] == t)) * 100 for t in times]
    delay = [max(r["max_delay_ms"] for r in flows if r["t"] == t) for t in times]
    probe_rows = [r for r in records if r["kind"] == "probe"]
    steps = workload_report.step_series(records)
    paused_t, paused_n = workload_report.paused_series(records)
    show_pfc = any(paused_n)
    resent = {w: series for w, series in workload_report.retransmission_series(records).items() if any(series[1])}
    panels = 2 * bool(flows) + bool(probe_rows) + bool(steps) + show_pfc + bool(resent) or 1
    fig, axes = plt.subplots(panels, 1, figsize=(11, 2.75 * panels + 0.5), sharex=True, squeeze=False)
    axes = list(axes[:, 0])
    top, bottom = axes[0], axes[-1]
    free = iter(axes)
    if flows:
        ax = next(free)
        ax.plot(times, loss, color="#d62728", drawstyle="steps-post")
        ax.set_ylabel("flow loss %")
        ax = next(free)
        ax.plot(times, delay, color="#1f77b4", drawstyle="steps-post")
        ax.set_ylabel("flow max delay ms")
    if probe_rows:
        ax = next(free)
        ax.plot([r["t"] for r in probe_rows], [r["loss_pct"] or 0 for r in probe_rows], color="#ff7f0e",
                drawstyle="steps-post")
        ax.set_ylabel("probe loss %")
    if steps:
        ax = next(free)
        for workload, (ts, ys) in steps.items():
            ax.plot(ts, ys, marker=".", linestyle="none", label=workload)
        for workload, c in report.get("collectives", {}).items():
            if c["first_hang_s"] is not None:
                ax.axvspan(c["first_hang_s"], c["recovered_s"] or report["duration_s"], color="#d62728", alpha=0.15)
        ax.set_ylabel("step s (slowest rank)")
        ax.legend(fontsize=7, loc="upper left", title="red: hung until recovered", title_fontsize=7)
    if resent:  # what go-back-N resent: the price a RoCE job pays for loss
        ax = next(free)
        for workload, (ts, ys) in resent.items():
            ax.bar(ts, ys, width=0.45, align="edge", label=workload)
        ax.set_ylabel("RoCE resent MB / 0.5 s")
        ax.legend(fontsize=7, loc="upper left")
    if show_pfc:  # congestion spreading: how many link directions PFC holds
        ax = next(free)
        ax.plot(paused_t, paused_n, color="#8c564b", drawstyle="steps-post")
        ax.set_ylabel("directions paused (PFC)")
    bottom.set_xlabel("seconds since scenario start")
    for fault in report["faults"]:
        start = fault["applied_s"] if fault["applied_s"] is not None else fault["scheduled_s"]
        end = fault["cleared_s"] if fault["cleared_s"] is not None else report["duration_s"]
        for ax in axes:
            ax.axvspan(start, end, color="#ffbb78", alpha=0.35)
        top.annotate(f"{fault['id']} ({fault['kind']})", (start, 1.02), xycoords=("data", "axes fraction"),
                     fontsize=8)
    for r in records:
        if r["kind"] == "route":
            top.axvline(r["t"], color="#7f7f7f", linewidth=0.4, alpha=0.5)
        elif r["kind"] in ("bgp", "bfd") and r["state"] == "down":
            top.axvline(r["t"], color="#9467bd", linewidth=0.8, linestyle="--")
    top.set_title(f"{report['scenario']} on {report['lab']}: grey = kernel route changes, "
                  "dashed = BGP/BFD down, shaded = fault", fontsize=9, pad=16)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_all(result: RunResult) -> dict:
    from twin.model.draw import draw

    report = grade(result, analyse(result))
    (result.directory / "report.json").write_text(json.dumps(report, indent=1))
    write_junit(report, result.directory / "junit.xml")
    write_timeline(result, report, result.directory / "timeline.png")
    marked = {t for f in result.scenario.faults for t in f.targets}
    named = {link_key(r["link"]) if r.get("link") else r.get("node")
             for r in result.events.records if r["kind"] == "verdict"}
    draw(result.scenario.fabric, result.directory / "topology.png", marked=marked, named=named)
    write_html(report, result.directory / "index.html")
    return report


def write_html(report: dict, path: Path) -> None:
    """One page tying the run together: verdict first, then faults, detectors, pictures, files."""
    from jinja2 import Environment, PackageLoader, select_autoescape

    env = Environment(loader=PackageLoader("twin", "templates"), autoescape=select_autoescape())
    files = sorted(p.name for p in path.parent.iterdir() if p.suffix in (".jsonl", ".json", ".xml"))
    path.write_text(env.get_template("report.html.j2").render(r=report, files=files, dumps=json.dumps))
