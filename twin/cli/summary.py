"""A run's report for people, in the terminal: the faults table, one line per workload,
detectors, expectations (`twin run`, `twin report`, `twin e2e`)."""

from __future__ import annotations

import json
from pathlib import Path

from rich.markup import escape
from rich.table import Table

from twin.cli.tools import out
from twin.results.report import Report


def print_summary(report: Report, directory: Path) -> None:
    table = Table(title=f"{report.scenario} on {report.lab}  ({directory})")
    for column in ("fault", "kind", "at (sched/actual)", "flow loss", "max delay", "route changes",
                   "first/last change", "BGP/BFD downs", "traffic back after"):
        table.add_column(column)
    for f in report.faults:
        loss, delay = f.flows.loss_pct, f.flows.max_delay_ms
        table.add_row(f.id, f.kind, f"{f.scheduled_s:.2f} / {f.applied_s or 0:.3f} s",
                      "-" if loss is None else f"{loss:.2f} %", "-" if delay is None else f"{delay:.0f} ms",
                      str(f.route_changes),
                      "-" if f.first_route_change_s is None else
                      f"{f.first_route_change_s:.2f} / {f.last_route_change_s:.2f} s",
                      f"{f.bgp_downs} / {f.bfd_downs}",
                      "-" if f.flows_recovered_after_s is None else f"{f.flows_recovered_after_s:.1f} s")
    out.print(table)
    base = report.baseline_flows
    if base.sent:
        out.print(f"baseline (no fault active): flow loss {base.loss_pct} %, max delay {base.max_delay_ms} ms")
    for line in workload_lines(report):
        out.print(line)
    for name, d in report.detectors.items():
        late = f" ({d.after_end} more after the end, not graded)" if d.after_end else ""
        out.print(f"detector {name}: {d.verdicts} verdicts{late}, {d.right} right, {d.wrong} wrong; "
                  f"detected {d.detected()}")
    print_expectations(report)
    for note in report.damaged:
        out.print(f"[yellow]damaged:[/] {escape(note)}")
    out.print(f"results: {directory} (report.json, junit.xml, events.jsonl, timeline.png, topology.png, index.html)")


def print_expectations(report: Report) -> None:
    for e in report.expectations:
        colour = "green" if e.passed else "red"
        out.print(f"[{colour}]{e.status.upper()}[/] {json.dumps(e.expect)}: {escape(e.message)}")
    for f in report.faults:
        if not f.on_schedule:
            out.print(f"[red]FAIL[/] fault {f.id} not applied on schedule: {f.error or f.schedule_error_s}")


def workload_lines(report: Report) -> list[str]:
    """One line per collective workload, one for the queues and one for the probe mesh."""
    lines = []
    for name, c in report.collectives.items():
        base = c.baseline
        windows = ", ".join(f"{f.id}: x{w['slowdown']}" if w.get("slowdown") else f"{f.id}: no iteration"
                            for f, w in zip(report.faults, c.fault_windows))
        stall = (f"; hung at {c.first_hang_s:.1f} s, back at {c.recovered_s:.1f} s"
                 if c.first_hang_s is not None and c.recovered_s is not None else
                 f"; hung at {c.first_hang_s:.1f} s, never recovered" if c.first_hang_s is not None else "")
        resent = c.transport_totals
        transport = (f"; roce resent {resent['retrans_bytes'] / 1e6:.1f} MB ({resent['naks_sent']} NAKs, "
                     f"{resent['timeouts']} timeouts, {resent['qp_errors']} QP errors)" if resent else "")
        lines.append(f"{name} ({c.transport}): {base['iterations']} healthy steps, median "
                     f"{base.get('median_step_s')} s, busbw {base.get('median_busbw_Bps', 0) / 1e6:.1f} MB/s; step "
                     f"time during faults ({windows or 'none'}){stall}; wrong elements {c.wrong}{transport}")
    fabric = report.fabric
    if fabric:
        paused = sum(fabric["pause_s"].values())
        lines.append(f"queues ({'lossless' if fabric['lossless'] else 'lossy'}): {fabric['queue_drops']} packets "
                     f"dropped by queues, {fabric['pauses']} PFC pauses, {paused:.2f} s paused over "
                     f"{fabric['paused_directions']} link direction(s)")
    probes = report.probes
    if probes:
        unseen = " (no probed path crossed it)"
        during = ", ".join(f"{f.id}: {w['loss_pct']} %" + (unseen if f.probed_paths == 0 else "")
                           for f, w in zip(report.faults, probes["fault_windows"]))
        lines.append(f"probes: loss {probes['baseline']['loss_pct']} % healthy, during faults {during or '-'}")
    mitigation = report.mitigation or {}
    dodges = mitigation.get("dodges") or {}
    if dodges.get("moved") or dodges.get("not_moved"):
        lines.append(f"hash dodging: {dodges['moved']} flow moves ({dodges['avoided_all']} off every suspected "
                     f"link; {dodges.get('before_a_loss', 0)} before losing a packet, on a verdict), "
                     f"{dodges['not_moved']} found no better port" +
                     (f"; first at {dodges['first_s']:.2f} s, last at {dodges['last_s']:.2f} s"
                      if dodges["moved"] else ""))
    for step in mitigation.get("isolation", []):
        lines.append(f"isolation: {step['op']} {step['link']} at {step['t']:.2f} s" +
                     (f" (took {step['took_s']} s)" if step.get("took_s") is not None else "") +
                     (f": {step['reason']}" if step.get("reason") else ""))
    return lines
