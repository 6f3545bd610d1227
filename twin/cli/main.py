"""The `twin` command: a thin layer over the library (click + rich)."""

from __future__ import annotations

import json
from dataclasses import asdict
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import click
from rich.markup import escape
from rich.table import Table

from twin import __version__
from twin.lab import deploy
from twin.model.describe import describe
from twin.errors import TwinError
from twin.lab.frr import vtysh_argv
from twin.lab.handle import lab_model, open_lab, running_lab
from twin.cli.train import train
from twin.lab.runtime import get_runtime
from twin.lab.runtime import names as runtime_names
from twin.lab.runtime.docker import container_labs
from twin.lab.runtime.netns import orphan_labs
from twin.train.session import refuse_during_training
from twin.lab.state import known_labs
from twin.lab.status import as_dict, lab_status, queue_status
from twin.cli.workloads import bench, dashboard, diagnose_cmd, probe, telemetry
from twin.cli.tools import RichProgress, console, out, progress_bar as _progress_bar

@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show tracebacks on errors.")
@click.version_option(__version__, prog_name="twin")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """fabric-twin: a network digital twin of an AI-training cluster fabric."""
    ctx.obj = {"debug": debug}


RUNTIME_OPTION = click.option("--runtime", type=click.Choice(runtime_names()), default=None,
                               help="Run the lab on this runtime instead of the lab file's (netns, docker).")


@cli.group()
def lab() -> None:
    """Build, inspect and remove labs (see labs/*.yaml)."""


@lab.command("up")
@click.argument("lab_ref", metavar="LAB")
@click.option("--timeout", default=60.0, show_default=True, help="Seconds to wait for convergence.")
@RUNTIME_OPTION
def lab_up(lab_ref: str, timeout: float, runtime: str | None) -> None:
    """Bring LAB (a name from labs/ or a path) up and wait until it has converged."""
    lab_file, fabric = open_lab(lab_ref)
    fabric.runtime = runtime or fabric.runtime
    started = time.monotonic()
    with _progress_bar() as bar:
        state = deploy.up(lab_file, fabric, RichProgress(bar), timeout_s=timeout)
    elapsed = time.monotonic() - started
    pairs = len(fabric.host_nics())
    out.print(f"[green]lab {fabric.name} is up[/] and converged in [bold]{elapsed:.1f} s[/]: "
              f"{len(fabric.switches)} switches, {len(fabric.hosts)} hosts ({pairs} NICs), "
              f"{len(fabric.links)} links; all ECMP next hops installed, all host NIC pairs reachable.")
    out.print("  phases: " + ", ".join(f"{k} {v:.2f} s" for k, v in state.timings_s.items() if k != "total"))
    first, last = fabric.host_nics()[0], fabric.host_nics()[-1]
    out.print(f"  next: twin lab status {fabric.name}\n"
              f"        twin lab exec {fabric.name} {first[0]} -- ping -c 3 -I {first[1].address.ip} "
              f"{last[1].address.ip}\n"
              f"        twin lab down {fabric.name}")


@lab.command("down")
@click.argument("name", metavar="LAB")
def lab_down(name: str) -> None:
    """Remove LAB and everything it owns (namespaces, links, daemons, files). Idempotent."""
    name = Path(name).stem if name.endswith((".yaml", ".yml")) else name
    started = time.monotonic()
    with _progress_bar() as bar:
        report = deploy.down(name, RichProgress(bar))
    if not report.had_state and report.nodes_removed == 0:
        out.print(f"lab {name} is not running; nothing to remove")
        return
    out.print(f"lab {name} removed in {time.monotonic() - started:.1f} s: {report.nodes_removed} nodes, "
              f"{report.daemons_stopped} daemons")


@lab.command("list")
def lab_list() -> None:
    """List labs that exist on this machine."""
    names = known_labs()
    if not names:
        out.print("no labs are up")
    for name in names:
        out.print(name)


@lab.command("show")
@click.argument("lab_ref", metavar="LAB")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def lab_show(lab_ref: str, as_json: bool) -> None:
    """Print LAB's nodes, links, addresses and ASNs (a running lab by name, else a lab file;
    no root needed, nothing is created)."""
    fabric = lab_model(lab_ref)
    if as_json:
        out.print_json(json.dumps({
            "name": fabric.name,
            "nodes": [{"name": n.name, "role": n.role, "asn": n.asn,
                       "loopback": str(n.loopback) if n.loopback else None} for n in fabric.nodes.values()],
            "links": [{"a": {"node": l.a.node, "ifname": l.a.ifname, "address": str(l.a.address)},
                       "b": {"node": l.b.node, "ifname": l.b.ifname, "address": str(l.b.address)},
                       "kind": l.kind} for l in fabric.links]}))
        return
    click.echo(describe(fabric), nl=False)


@lab.command("status")
@click.argument("name", metavar="LAB")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def lab_status_cmd(name: str, as_json: bool) -> None:
    """Per switch: BGP sessions, BFD peers, ECMP next hops, daemon health. Exit 1 if anything is unhealthy."""
    state, fabric = running_lab(name)
    runtime = get_runtime(state.runtime, name)
    statuses = lab_status(runtime, state, fabric)
    queues = queue_status(runtime, state, fabric)
    if as_json:
        out.print_json(json.dumps({"switches": as_dict(statuses), "queues": asdict(queues) | {"healthy": queues.healthy}}))
    else:
        table = Table(title=f"lab {name} ({state.status})")
        for column in ("switch", "daemons", "BGP established", "BFD up", "ECMP complete", "problems"):
            table.add_column(column)
        for s in statuses:
            daemons = "ok" if s.daemons and all(s.daemons.values()) else \
                "[red]dead: " + ",".join(d for d, ok in s.daemons.items() if not ok) + "[/]"
            bgp_up = sum(1 for v in s.bgp.values() if v == "Established")
            bfd_up = sum(1 for v in s.bfd.values() if v == "up")
            problems = [s.error] if s.error else []
            problems += [f"BGP {peer} {st}" for peer, st in s.bgp.items() if st != "Established"]
            problems += [f"BFD {peer} {st}" for peer, st in s.bfd.items() if st != "up"]
            problems += s.ecmp_short[:3]
            table.add_row(s.name, daemons, f"{bgp_up}/{len(s.bgp)}", f"{bfd_up}/{len(s.bfd)}",
                          f"{s.ecmp_ok}/{s.ecmp_expected}", "[red]" + "; ".join(problems) + "[/]" if problems else "")
        out.print(table)
        if state.drains:
            out.print(f"drained on purpose (BGP shut; `twin lab undrain {name} --all`): {', '.join(state.drains)}")
        print_queues(queues)
    if not all(s.healthy for s in statuses) or not queues.healthy:
        sys.exit(1)


def print_queues(queues) -> None:
    if not queues.lossless:
        out.print("queues: lossy (links.pfc: false): a full queue drops")
    elif not queues.controller:
        out.print("queues: lossless, but [red]the PFC controller is not running[/]: ports are neither paused "
                  "nor resumed (`twin lab down` and up again)")
    else:
        reaction = queues.reaction
        out.print(f"queues: lossless (PFC); controller reaction p50 {reaction.get('p50_us', '-')} us, "
                  f"p99 {reaction.get('p99_us', '-')} us over {reaction.get('events', 0)} events")
    if queues.ports:
        table = Table(title="ports that paused, were paused, went above XOFF or dropped (since the lab came up)")
        for column in ("port", "pauses received", "XOFF sent", "paused s", "held now", "queue now",
                       "queue peak", "above XOFF", "queue drops", "watchdog"):
            table.add_column(column)
        for row in queues.ports:
            drops = row["queue_drops"]
            table.add_row(row["port"], str(row["rx_pause"]), str(row["tx_pause"]), f"{row['paused_s']:.3f}",
                          "[yellow]yes[/]" if row["paused"] else "", str(row["queue"]), str(row["queue_peak"]),
                          str(row["xoff_times"]), f"[red]{drops}[/]" if drops else "0", str(row["watchdog"] or ""))
        out.print(table)
    for error in queues.errors[-3:]:
        out.print(f"PFC controller: {error}")


@lab.command("exec", context_settings={"ignore_unknown_options": True})
@click.argument("name", metavar="LAB")
@click.argument("node")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def lab_exec(name: str, node: str, command: tuple[str, ...]) -> None:
    """Run COMMAND inside NODE of LAB; its exit code is passed through.

    Use `--` before the command. `vtysh` on a switch talks to that switch's FRR.
    """
    state, fabric = running_lab(name)
    if node not in fabric.nodes:
        raise TwinError(f"lab {name} has no node '{node}'", hint="see `twin lab show " + name + "`")
    argv = list(command)
    if argv[0] == "vtysh":
        argv = vtysh_argv(state, node) + argv[1:]
    result = get_runtime(state.runtime, name).exec(node, argv, timeout=None, capture=False)
    sys.exit(result.rc)


@lab.command("graph")
@click.argument("lab_ref", metavar="LAB")
@click.option("-o", "--output", type=click.Path(path_type=Path), default=None,
              help="PNG or SVG file (default: LAB.png).")
def lab_graph(lab_ref: str, output: Path | None) -> None:
    """Draw LAB's fabric (a running lab by name, else a lab file) by tier and rail to a PNG or SVG file."""
    from twin.model.draw import draw
    fabric = lab_model(lab_ref)
    output = output or Path(f"{fabric.name}.png")
    if output.suffix.lower() not in (".png", ".svg"):
        raise TwinError(f"cannot write {output}: unknown picture format", hint="use a .png or .svg file name")
    out.print(f"wrote {draw(fabric, output)}")


@cli.command("run")
@click.argument("scenario_ref", metavar="SCENARIO")
@click.option("--keep", is_flag=True, help="Run on the lab if it is already up, and leave it up afterwards.")
@click.option("--results", type=click.Path(path_type=Path), default=Path("results"), show_default=True,
              help="Folder for the results (one sub-folder per run).")
@click.option("--timeout", default=90.0, show_default=True, help="Seconds to wait for the lab to converge.")
@RUNTIME_OPTION
def run_cmd(scenario_ref: str, keep: bool, results: Path, timeout: float, runtime: str | None) -> None:
    """Run a scenario: lab up, traffic, faults on schedule, results; always cleaned up after.

    SCENARIO is a file or a name from scenarios/. Exit 1 if a fault could not be applied on
    schedule or an expectation failed, 130 if interrupted.
    """
    from twin.results import report as reporting
    from twin.run import runner
    from twin.run.plan import load_scenario
    path = Path(scenario_ref)
    if not path.is_file() and Path("scenarios", f"{scenario_ref}.yaml").is_file():
        path = Path("scenarios", f"{scenario_ref}.yaml")
    scenario = load_scenario(path)
    scenario.fabric.runtime = runtime or scenario.fabric.runtime
    with _progress_bar() as bar:
        result = runner.run(scenario, results, keep=keep, progress=RichProgress(bar), timeout_s=timeout)
    summary = reporting.write_all(result)
    table = Table(title=f"{summary['scenario']} on {summary['lab']}  ({result.directory})")
    for column in ("fault", "kind", "at (sched/actual)", "flow loss", "max delay", "route changes",
                   "first/last change", "BGP/BFD downs", "traffic back after"):
        table.add_column(column)
    for f in summary["faults"]:
        loss = f["flows"]["loss_pct"]
        table.add_row(f["id"], f["kind"], f"{f['scheduled_s']:.2f} / {f['applied_s'] or 0:.3f} s",
                      "-" if loss is None else f"{loss:.2f} %",
                      "-" if f["flows"]["max_delay_ms"] is None else f"{f['flows']['max_delay_ms']:.0f} ms",
                      str(f["route_changes"]),
                      "-" if f["first_route_change_s"] is None else
                      f"{f['first_route_change_s']:.2f} / {f['last_route_change_s']:.2f} s",
                      f"{f['bgp_downs']} / {f['bfd_downs']}",
                      "-" if f["flows_recovered_after_s"] is None else f"{f['flows_recovered_after_s']:.1f} s")
    out.print(table)
    base = summary["baseline_flows"]
    if base["sent"]:
        out.print(f"baseline (no fault active): flow loss {base['loss_pct']} %, max delay {base['max_delay_ms']} ms")
    for line in workload_lines(summary):
        out.print(line)
    for name, d in summary["detectors"].items():
        out.print(f"detector {name}: {d['verdicts']} verdicts, {d['right']} right, {d['wrong']} wrong; detected "
                  + (", ".join(f"{k} after {v} s" for k, v in d["detect_s"].items()) or "nothing"))
    _print_expectations(summary)
    out.print(f"results: {result.directory} (report.json, junit.xml, events.jsonl, timeline.png, topology.png)")
    if not summary["passed"]:
        sys.exit(1)


def _print_expectations(summary: dict) -> None:
    for e in summary["expectations"]:
        colour = "green" if e["status"] == "pass" else "red"
        out.print(f"[{colour}]{e['status'].upper()}[/] {json.dumps(e['expect'])}: {escape(e['message'])}")
    for f in summary["faults"]:
        if not f["on_schedule"]:
            out.print(f"[red]FAIL[/] fault {f['id']} not applied on schedule: {f.get('error') or f['schedule_error_s']}")


@cli.command("e2e")
@click.argument("scenarios", nargs=-1, metavar="[SCENARIO]...")
@click.option("--quick", is_flag=True,
              help="For CI: 3 s before the first fault, 3 s after the last clear, one bring-up per lab.")
@click.option("--results", type=click.Path(path_type=Path), default=Path("results"), show_default=True,
              help="Folder for the results (one sub-folder per run).")
@click.option("--lab", "labs", multiple=True, metavar="LAB",
              help="Only the scenarios on this lab (repeatable); default: every lab.")
@RUNTIME_OPTION
def e2e_cmd(scenarios: tuple[str, ...], quick: bool, results: Path, labs: tuple[str, ...],
            runtime: str | None) -> None:
    """The fault drill: run every scenario in scenarios/ (or the ones named) one after another
    and grade every expectation. Exit 1 if any scenario failed."""
    from twin.run.drill import run_drill, scenario_files
    from twin.run.plan import load_scenario
    files = scenario_files(scenarios)
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise TwinError(f"no such scenario: {', '.join(missing)}", hint="give files, or names from scenarios/")
    loaded = [load_scenario(f, quick=quick) for f in files]  # every file is valid before anything runs
    unknown = set(labs) - {s.fabric.name for s in loaded}
    if unknown:
        raise TwinError(f"no scenario runs on lab {', '.join(sorted(unknown))}",
                        hint="labs of the scenarios: " + ", ".join(sorted({s.fabric.name for s in loaded})))
    loaded = [s for s in loaded if not labs or s.fabric.name in labs]
    for scenario in loaded:
        scenario.fabric.runtime = runtime or scenario.fabric.runtime

    @contextmanager
    def progress():
        with _progress_bar() as bar:
            yield RichProgress(bar)

    def started(number: int, scenario) -> None:
        out.print(f"[bold][{number}/{len(loaded)}] {scenario.spec.name}[/] on {scenario.fabric.name}, "
                  f"{scenario.spec.duration_s:g} s")

    def finished(_scenario, outcome) -> None:
        if outcome.summary:
            _print_expectations(outcome.summary)
        else:
            out.print(f"[red]ERROR[/] {escape(outcome.error)}")

    outcomes = run_drill(loaded, results, quick, progress, started, finished)
    table = Table(title="fault drill" + (" (quick)" if quick else ""))
    for column in ("scenario", "result", "expectations", "detected after", "results"):
        table.add_column(column)
    for o in outcomes:
        graded = o.summary["expectations"] if o.summary else []
        detected = sorted({f"{v} s" for d in (o.summary or {}).get("detectors", {}).values()
                           for v in d["detect_s"].values()})
        table.add_row(o.scenario, "[green]pass[/]" if o.passed else "[red]FAIL[/]",
                      f"{sum(e['status'] == 'pass' for e in graded)}/{len(graded)} passed" if o.summary else o.error,
                      ", ".join(detected) or "-", str(o.directory or "-"))
    out.print(table)
    failed = [o.scenario for o in outcomes if not o.passed]
    out.print(f"{len(outcomes) - len(failed)} of {len(outcomes)} scenarios passed" +
              (f"; failed: {', '.join(failed)}" if failed else ""))
    if failed:
        sys.exit(1)


def workload_lines(summary: dict) -> list[str]:
    """One line per collective workload and one for the probe mesh, for people."""
    lines = []
    for name, c in summary.get("collectives", {}).items():
        base = c["baseline"]
        windows = ", ".join(f"{f['id']}: x{w['slowdown']}" if w.get("slowdown") else f"{f['id']}: no iteration"
                            for f, w in zip(summary["faults"], c["fault_windows"]))
        stall = (f"; hung at {c['first_hang_s']:.1f} s, back at {c['recovered_s']:.1f} s"
                 if c["first_hang_s"] is not None and c["recovered_s"] is not None else
                 f"; hung at {c['first_hang_s']:.1f} s, never recovered" if c["first_hang_s"] is not None else "")
        resent = c.get("transport_totals")
        transport = (f"; roce resent {resent['retrans_bytes'] / 1e6:.1f} MB ({resent['naks_sent']} NAKs, "
                     f"{resent['timeouts']} timeouts, {resent['qp_errors']} QP errors)" if resent else "")
        lines.append(f"{name} ({c.get('transport', 'tcp')}): {base['iterations']} healthy steps, median "
                     f"{base.get('median_step_s')} s, busbw {base.get('median_busbw_Bps', 0) / 1e6:.1f} MB/s; step "
                     f"time during faults ({windows or 'none'}){stall}; wrong elements {c['wrong']}{transport}")
    fabric = summary.get("fabric")
    if fabric:
        paused = sum(fabric["pause_s"].values())
        lines.append(f"queues ({'lossless' if fabric['lossless'] else 'lossy'}): {fabric['queue_drops']} packets "
                     f"dropped by queues, {fabric['pauses']} PFC pauses, {paused:.2f} s paused over "
                     f"{fabric['paused_directions']} link direction(s)")
    probes = summary.get("probes")
    if probes:
        during = ", ".join(f"{f['id']}: {w['loss_pct']} %" for f, w in zip(summary["faults"], probes["fault_windows"]))
        lines.append(f"probes: loss {probes['baseline']['loss_pct']} % healthy, during faults {during or '-'}")
    mitigation = summary.get("mitigation") or {}
    dodges = mitigation.get("dodges") or {}
    if dodges.get("moved") or dodges.get("not_moved"):
        lines.append(f"hash dodging: {dodges['moved']} flow moves ({dodges['avoided_all']} off every suspected "
                     f"link; {dodges.get('before_a_loss', 0)} before losing a packet, on a verdict), "
                     f"{dodges['not_moved']} found no better port" +
                     (f"; first at {dodges['first_s']:.2f} s, last at {dodges['last_s']:.2f} s" if dodges["moved"] else ""))
    for step in mitigation.get("isolation", []):
        lines.append(f"isolation: {step['op']} {step['link']} at {step['t']:.2f} s" +
                     (f" (took {step['took_s']} s)" if step.get("took_s") is not None else "") +
                     (f": {step['reason']}" if step.get("reason") else ""))
    return lines


@cli.group()
def fault() -> None:
    """Inject, list and clear faults on a running lab."""


def _fault_context(name: str):
    from twin.faults.base import FaultContext
    state, fabric = running_lab(name)
    refuse_during_training(state, "changing faults or drains by hand")
    return FaultContext(get_runtime(state.runtime, name), state, fabric)


def _yaml_value(text: str):
    from ruamel.yaml import YAML
    return YAML(typ="safe").load(text)


@fault.command("inject")
@click.argument("name", metavar="LAB")
@click.argument("kind")
@click.option("--id", "fault_id", help="Name of the fault (default: the kind).")
@click.option("--link", help='The link, "node-a -- node-b".')
@click.option("--node", help="The node (switch or host) for node faults.")
@click.option("--direction", type=click.Choice(["a_to_b", "b_to_a", "both"]), help="Link faults: which way.")
@click.option("-p", "--param", "params", multiple=True, metavar="KEY=VALUE",
              help="A kind-specific key, e.g. -p loss_pct=2 (repeatable).")
def fault_inject(name, kind, fault_id, link, node, direction, params) -> None:
    """Inject a fault of KIND into LAB now; it stays until `twin fault clear`.

    Kinds: bgp_down, bitflip, blackhole, flap, link_down, pfc_pause, pfc_storm, silent_drop, slow_node,
    switch_down.
    """
    from twin.faults import engine
    entry = {"id": fault_id or kind.replace("_", "-"), "kind": kind}
    for key, value in (("link", link), ("node", node), ("direction", direction)):
        if value is not None:
            entry[key] = value
    for item in params:
        if "=" not in item:
            raise TwinError(f"-p {item}: expected KEY=VALUE", hint="e.g. -p loss_pct=2")
        key, value = item.split("=", 1)
        entry[key] = _yaml_value(value)
    timing, fault_params = engine.parse(entry)
    ctx = _fault_context(name)
    engine.inject(ctx, timing, fault_params)
    out.print(f"fault {timing.id} ({timing.kind}) applied to lab {name}; clear with "
              f"`twin fault clear {name} {timing.id}`")


@fault.command("list")
@click.argument("name", metavar="LAB")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def fault_list(name: str, as_json: bool) -> None:
    """List the faults active on LAB."""
    from twin.faults import engine
    state, _fabric = running_lab(name)
    if state.sealed:
        out.print(f"a training session is active on lab {name}: its faults are hidden "
                  "(`twin train reveal` shows them)")
        return
    faults = engine.active(state)
    if as_json:
        out.print_json(json.dumps(faults))
        return
    if not faults:
        out.print(f"no faults active on lab {name}")
    for f in faults:
        detail = ", ".join(f"{k}={v}" for k, v in f["params"].items() if v is not None)
        since = time.time() - f["applied_at"]
        out.print(f"{f['id']:<16} {f['kind']:<12} {detail}  (active {since:.0f} s)")


@fault.command("clear")
@click.argument("name", metavar="LAB")
@click.argument("fault_id", required=False, metavar="[ID]")
@click.option("--all", "clear_all", is_flag=True, help="Clear every active fault.")
def fault_clear(name: str, fault_id: str | None, clear_all: bool) -> None:
    """Clear fault ID (or --all) on LAB, restoring exactly what it changed."""
    from twin.faults import engine
    if bool(fault_id) == clear_all:
        raise TwinError("give a fault ID or --all", hint=f"see `twin fault list {name}`")
    ctx = _fault_context(name)
    cleared = engine.clear_all(ctx) if clear_all else [engine.clear(ctx, fault_id)]
    for entry in cleared:
        report = entry["record"].get("report")
        out.print(f"cleared {entry['id']} ({entry['kind']})" + (f": {report}" if report else ""))


@lab.command("drain")
@click.argument("name", metavar="LAB")
@click.argument("link")
def lab_drain(name: str, link: str) -> None:
    """Take LINK ("a -- b") out of service: shut its BGP session on both ends, as a controller
    isolates a bad link. Traffic moves to the other ECMP members; the link stays up."""
    from twin.mitigate.drain import drain
    key = drain(_fault_context(name), link)
    out.print(f"drained {key}; restore it with `twin lab undrain {name} \"{key}\"`")


@lab.command("undrain")
@click.argument("name", metavar="LAB")
@click.argument("link", required=False)
@click.option("--all", "undrain_all", is_flag=True, help="Every drained link.")
def lab_undrain(name: str, link: str | None, undrain_all: bool) -> None:
    """Put a drained LINK (or --all) back into service (after the repair)."""
    from twin.mitigate.drain import undrain
    ctx = _fault_context(name)
    if bool(link) == undrain_all:
        raise TwinError("give a LINK or --all", hint=f"drained: {', '.join(ctx.state.drains) or 'none'}")
    for key in list(ctx.state.drains) if undrain_all else [link]:
        out.print(f"undrained {undrain(ctx, key)}")


@cli.command("export")
@click.argument("lab_ref", metavar="LAB")
@click.option("--format", "fmt", type=click.Choice(["containerlab"]), default="containerlab", show_default=True)
@click.option("--out", "folder", type=click.Path(path_type=Path), required=True, help="Folder to write (created).")
def export_cmd(lab_ref: str, fmt: str, folder: Path) -> None:
    """Write LAB as a containerlab topology (<lab>.clab.yml, one folder of FRR configs per switch),
    for a twin larger than one machine: containerlab's multi-host mode or clabernetes."""
    from twin.lab.export import problems, topology, write
    _lab, fabric = open_lab(lab_ref)
    found = problems(topology(fabric))
    if found:
        raise TwinError(f"the export breaks containerlab's rules: {found[0]}", hint=f"{len(found)} problem(s)")
    path = write(fabric, folder)
    out.print(f"wrote {path} ({len(fabric.nodes)} nodes, {len(fabric.links)} links) and FRR configs for "
              f"{len(fabric.switches)} switches; deploy with `containerlab deploy -t {path}`")


@cli.command()
def cleanup() -> None:
    """Remove every lab this tool owns on this machine (and nothing else)."""
    labs = set(known_labs())
    labs |= orphan_labs() | container_labs()
    if not labs:
        out.print("nothing to clean up")
    for name in sorted(labs):
        report = deploy.down(name)
        out.print(f"removed lab {name}: {report.nodes_removed} nodes, {report.daemons_stopped} daemons")


for command in (bench, probe, telemetry, diagnose_cmd, dashboard, train):
    cli.add_command(command)


def main() -> None:
    debug = "--debug" in sys.argv
    try:
        cli(standalone_mode=False)
    except click.exceptions.Abort:
        console.print("aborted")
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except TwinError as exc:
        if debug:
            raise
        console.print("[bold red]error:[/] " + escape(exc.message))
        if exc.hint:
            console.print("[bold]hint:[/] " + escape(exc.hint))
        sys.exit(2)
    except KeyboardInterrupt:
        console.print("interrupted")
        sys.exit(130)
