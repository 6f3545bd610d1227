"""Commands that run traffic or read counters on a running lab: bench collective, probe, telemetry, diagnose."""

from __future__ import annotations

import gc
import json
import sys
import time
from pathlib import Path

import click
from prometheus_client import start_http_server
from rich.table import Table

from twin.cli.tools import out, progress, until_interrupted
from twin.collectives.bench import run_bench
from twin.collectives.groups import ORDERS, RankSpecError
from twin.collectives.metrics import OPS, human_size, size_sweep
from twin.detect.diagnose import diagnose
from twin.detect.slow_node_search import find_slow_node
from twin.errors import TwinError
from twin.lab.handle import Lab, lab_model
from twin.lab.ports.counters import interface_rates
from twin.probes.focus import TIMES as FOCUS_TIMES
from twin.probes.mesh import cover_load
from twin.probes.pace import MIN_LINK_PPS, floor_per_interval
from twin.probes.run import run_probe_mesh
from twin.probes.selection import PAIR_MODES, PATHS_PER_LINK, REPORT_MS, cover_plan
from twin.roce.qp import DEFAULT_IB_TIMEOUT, DEFAULT_RETRY_CNT
from twin.telemetry import gnmi
from twin.telemetry.prometheus import registry_for
from twin.telemetry.routing_state import RoutingState
from twin.telemetry.sampler import Sampler
from twin.workloads.probes import ProbesParams, check_load, check_plan_size


@click.group()
def bench() -> None:
    """Benchmarks on a running lab."""


# --multipath as the collective's `multipath` (docs/formats.md)
MULTIPATH_CHOICES = {"off": False, "on": True, "rc": "rc"}


@bench.command("collective")
@click.argument("name", metavar="LAB")
@click.option("--op", type=click.Choice(OPS), default="allreduce", show_default=True)
@click.option("--sizes", default="1MiB:16MiB", show_default=True,
              help="low:high, doubling (nccl-tests -b/-e/-f 2), or one size. Bytes per rank; "
                   "for allgather/reducescatter the total over all ranks.")
@click.option("--ranks", default="all", show_default=True,
              help="all | rail:N (rail-aligned) | hosts:H1,H2 (every NIC of those hosts).")
@click.option("--order", type=click.Choice(ORDERS), default="topo", show_default=True,
              help="Ring order: topo puts NICs under one leaf next to each other; naive interleaves leaves.")
@click.option("--channels", default=1, show_default=True, type=click.IntRange(1, 8),
              help="Connections (process groups) per rank pair; each carries 1/N of the data.")
@click.option("--iters", default=5, show_default=True, type=click.IntRange(1, 1000))
@click.option("--warmup", default=1, show_default=True, type=click.IntRange(0, 100))
@click.option("--timeout", default=60.0, show_default=True, help="Seconds a single collective may take.")
@click.option("--transport", type=click.Choice(["tcp", "roce"]), default="tcp", show_default=True,
              help="tcp: gloo over TCP; roce: RoCE's RC transport emulated over UDP (go-back-N).")
@click.option("--qps-per-connection", default=1, show_default=True, type=click.IntRange(1, 8),
              help="roce: QPs per rank pair (NCCL_IB_QPS_PER_CONNECTION), each its own ECMP path.")
@click.option("--ib-timeout", default=DEFAULT_IB_TIMEOUT, show_default=True, type=click.IntRange(0, 31),
              help="roce: NCCL_IB_TIMEOUT, first retransmission timeout 4.096 us x 2^n.")
@click.option("--retry-cnt", default=DEFAULT_RETRY_CNT, show_default=True, type=click.IntRange(0, 7),
              help="roce: NCCL_IB_RETRY_CNT, retries before a QP fails.")
@click.option("--cc", type=click.Choice(["dcqcn", "none"]), default="dcqcn", show_default=True,
              help="roce: congestion control (DCQCN: a CE mark comes back as a CNP that cuts the QP's rate).")
@click.option("--multipath", type=click.Choice(list(MULTIPATH_CHOICES)), default="off", show_default=True,
              help="roce: on: packets marked reorderable (a lab balancing by flowlet or packet spreads them), "
                   "sprayed over 16 source ports by the NIC, and selective repeat; rc: marked, the QPs still go "
                   "back N (a NIC without out-of-order placement).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def bench_collective(name, op, sizes, ranks, order, channels, iters, warmup, timeout, transport,
                     qps_per_connection, ib_timeout, retry_cnt, cc, multipath, as_json) -> None:
    """Time a collective, one rank per host NIC, like nccl-tests: over gloo (TCP) or the
    emulated RoCE transport.

    Every iteration's result is checked against the expected values (#wrong). busbw uses
    nccl-tests' factors; "line" is busbw as a fraction of the lab's line rate. On roce the
    table adds what the transport retransmitted, its NAKs and timeouts.
    """
    try:
        size_list = size_sweep(sizes)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--sizes") from None
    if multipath != "off" and transport != "roce":
        raise click.BadParameter("applies to --transport roce (gloo's TCP is one path per connection)",
                                 param_hint="--multipath")
    lab = Lab.open(name)
    fabric = lab.fabric
    try:
        with progress() as bar:
            result = run_bench(lab, op, size_list, ranks, order, channels, iters, warmup, timeout, bar, transport,
                               {"ib_timeout": ib_timeout, "retry_cnt": retry_cnt, "cc": cc,
                                "qps_per_connection": qps_per_connection, "time_scale": 1.0,
                                "multipath": MULTIPATH_CHOICES[multipath]})
    except RankSpecError as exc:
        raise TwinError(str(exc), hint="see `twin lab show " + name + "` for host and NIC names") from None
    if as_json:
        out.print_json(json.dumps(result.as_dict()))
        return
    roce = transport == "roce"
    table = Table(title=f"{op} over {transport}, {len(result.ranks)} ranks ({ranks}, {order} ring, "
                  f"{channels} channel(s){f', {qps_per_connection} QP(s) per pair' if roce else ''}), "
                  f"line rate {fabric.rate_bps / 1e6:g} Mbit/s", title_justify="left")
    for column in ("size", "count", "type", "time (ms)", "algbw (MB/s)", "busbw (MB/s)", "line", "#wrong",
                   *(("retrans MB", "NAKs", "timeouts", "CNPs", "out of order") if roce else ())):
        table.add_column(column, justify="right")
    for m in result.measurements:
        extra = (f"{m.transport.get('retrans_bytes', 0) / 1e6:.2f}", str(m.transport.get("naks_sent", 0)),
                 str(m.transport.get("timeouts", 0)), str(m.transport.get("cnps_received", 0)),
                 str(m.transport.get("out_of_order", 0))) if roce else ()
        table.add_row(human_size(m.size), str(m.count), "float", f"{m.time_s * 1000:.1f}",
                      f"{m.algbw / 1e6:.2f}", f"{m.busbw / 1e6:.2f}", f"{m.line_fraction(fabric.rate_bps):.2f}",
                      str(m.wrong), *extra)
    out.print(table)
    out.print(f"bytes into spines: {result.spine_bytes / 1e6:.1f} MB, into superspines: "
              f"{result.superspine_bytes / 1e6:.1f} MB; ring hops crossing spines: "
              f"{result.ring_hops_crossing_spines}/{len(result.ranks)}; CPU busy per core: "
              + ", ".join(f"{p:.0f}%" for p in result.cpu_busy_pct))
    wrong = sum(m.wrong for m in result.measurements)
    if wrong:
        raise TwinError(f"{wrong} wrong elements: the collective returned corrupted data")


# what lowers a probe mesh's load, or lets it run: the probe command's options for the workload's keys
OPTIONS_HINT = "--interval-ms, --paths-per-link, --min-link-pps or --max-pps"


@click.command("probe")
@click.argument("name", metavar="LAB")
@click.option("--duration", default=10.0, show_default=True, help="Seconds to probe.")
@click.option("--interval-ms", default=100, show_default=True, type=click.IntRange(10, 10000),
              help="Each path is probed once per interval.")
@click.option("--pairs", type=click.Choice(PAIR_MODES), default="cover", show_default=True,
              help="cover: every link; rail: same-rail pairs; full: every NIC pair across hosts.")
@click.option("--paths-per-link", default=PATHS_PER_LINK, show_default=True, type=click.IntRange(1, 8),
              help="cover: probed paths crossing every link in each direction.")
@click.option("--rtt-every", default=1, show_default=True, type=click.IntRange(1, 1000),
              help="Echo one probe in this many for the round trip (loss and one-way delay count them all).")
@click.option("--min-link-pps", default=MIN_LINK_PPS, show_default=True, type=click.IntRange(0, 100000),
              help="cover: probe the flows over link directions that fewer probes cross more than once an "
                   "interval until each carries this many probes/s, or twice --paths-per-link an interval if fewer "
                   "(0: never).")
@click.option("--max-pps", default=ProbesParams.model_fields["max_pps"].default, show_default=True,
              type=click.IntRange(1, 100000),
              help="Refuse a mesh that would send more probes/s (as the probes workload's max_pps); a focus "
                   "stays within it.")
@click.option("--focus", default=FOCUS_TIMES, show_default=True, type=click.IntRange(1, 16),
              help="cover: after a loss, probe the flows over that path's links this many times an interval "
                   "for 2 s (1: never).")
@click.option("--plan", "plan_only", is_flag=True,
              help="Print the cover plan from the lab's model (a running lab, or a lab file) and probe nothing: "
                   "the flows it would probe and the links and switches no probe of it tells apart.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def probe(name, duration, interval_ms, pairs, paths_per_link, rtt_every, min_link_pps, max_pps, focus, plan_only,
          as_json) -> None:
    """Run the probe mesh for a while: path discovery, then loss and RTT per path.

    Prints the probe load, the fabric links no discovered path crosses, and every path
    that lost probes (with the links it crosses). With --plan, only what the plan would probe
    and what it leaves ambiguous (a fault there is named as the set of candidates).
    """
    if plan_only:
        print_plan(name, interval_ms, pairs, paths_per_link, min_link_pps, max_pps, as_json)
        return
    lab = Lab.open(name)
    running = sorted(d.name for d in (lab.paths.root / "probes").glob("*") if d.is_dir())
    if running:  # its agents hold the probe port on every NIC: a second mesh's agents could not bind
        raise TwinError(f"a probe mesh already runs on lab {name} ({', '.join(running)}): a second one would "
                        "need the same ports on the same NICs",
                        hint=f"its loss per link is on `twin dashboard {name}`; or wait until it stops "
                             "(a training session's pingmesh runs until `twin train stop`)")
    params = ProbesParams(interval_ms=interval_ms, pairs=pairs, paths_per_link=paths_per_link, rtt_every=rtt_every,
                          min_link_pps=min_link_pps, max_pps=max_pps, focus=focus)
    try:
        check_load(params, lab.fabric)
    except ValueError as exc:
        raise TwinError(str(exc), hint=getattr(exc, "hint", None) or OPTIONS_HINT) from None
    with progress() as bar:
        summary = run_probe_mesh(lab, duration, interval_ms, pairs, bar, paths_per_link=paths_per_link,
                                 rtt_every=rtt_every, focus=focus, min_link_pps=min_link_pps, max_pps=max_pps)
    if as_json:
        out.print_json(json.dumps(summary))
        return
    load = summary["load"]
    out.print(f"{summary['paths']} paths over {summary['pairs']} NIC pairs; configured {load['probes_per_s']} "
              f"probes/s ({load['max_per_nic']} on the busiest NIC), achieved {summary['achieved_pps']} probes/s; "
              f"agents' CPU {summary['cpu_s']} s")
    coverage = summary["coverage"]
    if coverage:
        out.print(f"every link direction crossed by >= {coverage['paths_per_link']} probed paths except "
                  f"{coverage['hops_short']} of {coverage['hops']}; per link direction {coverage['link_pps_min']} "
                  f"probes/s at least, {coverage['link_pps_median']} median"
                  + (f"; {coverage['paced_flows']} flows probed more than once an interval "
                     f"({coverage['paced_probes_per_s']} probes/s more)" if coverage.get("paced_flows") else "")
                  + (f"; {coverage['route_flows']} of the paths test routes only, once per report"
                     if coverage.get("route_flows") else "")
                  + (f"; no probe tells apart: {'; '.join(' / '.join(g) for g in coverage['ambiguous'])}"
                     if coverage["ambiguous"] else ""))
    out.print(f"links crossed by no probed path: {', '.join(summary['uncovered']) or 'none'}")
    table = Table(title="paths that lost probes", title_justify="left")
    for column in ("src", "dst", "sport", "sent", "lost", "rtt p50 ms", "rtt p99 ms", "links"):
        table.add_column(column)
    for row in summary["lossy_paths"]:
        table.add_row(row["src"], row["dst"], str(row["sport"]), str(row["sent"]), str(row["lost"]),
                      str(row["rtt_p50_ms"]), str(row["rtt_p99_ms"]), " | ".join(link or "?" for link in row["links"]))
    out.print(table if summary["lossy_paths"] else "no path lost probes")
    out.print(f"RTT over all paths: p50 {summary['rtt_p50_ms']} ms, p99 {summary['rtt_p99_ms']} ms")


def print_plan(ref: str, interval_ms: int, pairs: str, paths_per_link: int, min_link_pps: int, max_pps: int,
               as_json: bool) -> None:
    """The cover plan as the model draws it (the mesh selects on the paths it discovers, which the
    kernel's hash decides: the same classes where the fabric's shape causes them)."""
    if pairs != "cover":
        raise TwinError(f"--plan shows the cover plan, not pairs: {pairs}",
                        hint="drop --pairs, or use `twin probe LAB --pairs ...` to probe")
    fabric = lab_model(ref)
    try:
        check_plan_size(fabric, pairs, paths_per_link)
    except ValueError as exc:
        raise TwinError(str(exc), hint=getattr(exc, "hint", None)) from None
    floor = floor_per_interval(min_link_pps, interval_ms, paths_per_link)
    summary = cover_load(cover_plan(fabric, paths_per_link, floor=floor), paths_per_link, interval_ms)
    refused = summary["probes_per_s"] > max_pps  # what `twin probe` would say, without planning again
    if as_json:
        out.print_json(json.dumps({"lab": fabric.name, **summary, "max_pps": max_pps, "refused": refused}))
        return
    out.print(f"{fabric.name}: {summary['flows']} probed flows, {summary['probes_per_s']} probes/s at "
              f"{interval_ms} ms ({summary['max_per_nic']} on the busiest NIC); every link direction crossed by "
              f">= {paths_per_link} paths except {summary['hops_short']} of {summary['hops']}, "
              f"{summary['link_pps_min']} probes/s at least"
              + (f" ({summary['paced_flows']} flows probed more than once an interval for it)"
                 if summary["paced_flows"] else ""))
    if refused:
        out.print(f"a run would be refused: {summary['probes_per_s']} probes/s is over --max-pps {max_pps} "
                  f"({OPTIONS_HINT})")
    if summary["route_flows"]:
        out.print(f"{summary['route_flows']} more flows, probed once per {REPORT_MS} ms report, test the leaves' "
                  "routes toward hosts no flow above reaches from under them")
    if not summary["ambiguous"]:
        out.print("the plan tells every single lossy link or switch apart from every other")
        return
    out.print(f"{len(summary['ambiguous'])} sets of causes no probe of the plan tells apart (a fault on one is "
              "named as its set: probe-likelihood's set verdicts):")
    for group in summary["ambiguous"]:
        out.print("  " + " / ".join(group))


@click.command("telemetry")
@click.argument("name", metavar="LAB")
@click.option("--interval-ms", default=100, show_default=True, type=click.IntRange(10, 60000),
              help="Sampling period.")
@click.option("--duration", default=5.0, show_default=True, help="Seconds to sample (without --serve).")
@click.option("--out", "output", type=click.Path(path_type=Path),
              help="Also write every sample to this JSON-lines file.")
@click.option("--serve", is_flag=True, help="Serve the latest counters in Prometheus text format until Ctrl-C.")
@click.option("--port", default=9464, show_default=True, help="Port for --serve (localhost only).")
@click.option("--gnmi", is_flag=True, help="Serve gNMI (Capabilities, Get, Subscribe; OpenConfig paths, one target "
              "per node) until Ctrl-C.")
@click.option("--gnmi-port", default=9339, show_default=True, help="Port for --gnmi (localhost only).")
def telemetry(name, interval_ms, duration, output, serve, port, gnmi, gnmi_port) -> None:
    """Sample every node's interface, qdisc, checksum-error and fault counters.

    Without --serve or --gnmi: sample for --duration seconds and print the busiest interfaces
    and the achieved sampling period. With --serve: http://127.0.0.1:PORT/metrics. With --gnmi:
    a gNMI server on 127.0.0.1:GNMI-PORT (docs/guide/workloads.md lists its paths).
    """
    lab = Lab.open(name)
    sampler = Sampler(lab, interval_ms, output)
    if serve or gnmi:
        _serve(lab, sampler, port if serve else None, gnmi_port if gnmi else None)
        return
    sampler.start()
    first = None
    with progress() as bar:
        bar.phase(f"sampling {duration:g} s", int(duration))
        for _ in range(int(duration)):
            time.sleep(1)
            first = first or sampler.latest
            bar.advance()
        time.sleep(duration - int(duration))
    stats = sampler.stop()
    last = sampler.latest
    table = Table(title=f"busiest interfaces over {last.t - first.t:.1f} s", title_justify="left")
    for column in ("node", "interface", "rx Mbit/s", "tx Mbit/s", "drops", "backlog B"):
        table.add_column(column, justify="right")
    for rate in interface_rates(first, last)[:15]:
        table.add_row(rate.node, rate.ifname, f"{rate.rx_bps / 1e6:.2f}", f"{rate.tx_bps / 1e6:.2f}", str(rate.drops),
                      str(rate.backlog_bytes))
    out.print(table)
    errors = {f"{h} {c}": v for (h, c), v in last.checksum_errors.items() if v}
    out.print(f"checksum errors: {errors or 'none'}; sampling: {stats['samples']} samples, period "
              f"{stats['period_ms']:g} ms, achieved mean {stats['achieved_mean_ms']} ms, max "
              f"{stats['achieved_max_ms']} ms, one read {stats['read_mean_ms']} ms")


FIRST_READ_S = 60.0  # every node's sockets opened and counters read: pod128's 4,600 interfaces take seconds


def _serve(lab: Lab, sampler: Sampler, http_port: int | None, gnmi_port: int | None) -> None:
    """The Prometheus page, the gNMI server or both, over one sampler and one routing reader, until Ctrl-C."""
    routing = RoutingState(lab)
    stops = [routing.stop]
    try:
        # The first read opens the sampler's sockets in every node before gRPC starts its threads:
        # none of them forks now (lab/ports/counters.py), but a child forked beside gRPC's threads can
        # crash (grpc's fork support), so nothing the sampler opens may ever come after.
        sampler.start()
        stops.append(sampler.stop)
        if not sampler.wait_first_read(FIRST_READ_S):
            raise TwinError(f"the counters of lab {lab.name} were not read within {FIRST_READ_S:g} s",
                            hint="is the machine overloaded? `twin lab status` shows the lab's state")
        if http_port is not None:
            server, thread = start_http_server(http_port, addr="127.0.0.1",
                                               registry=registry_for(sampler, lab.fabric, routing))
            stops.append(lambda: (server.shutdown(), thread.join(timeout=2)))
            out.print(f"serving http://127.0.0.1:{http_port}/metrics")
        if gnmi_port is not None:
            source = gnmi.LabSource(lab, sampler, routing)
            grpc_server, bound = gnmi.serve(source, gnmi_port)
            stops.append(lambda: grpc_server.stop(grace=1).wait())
            out.print(f"serving gNMI on 127.0.0.1:{bound}, a target per node (e.g. {source.nodes[0]})")
        out.print("Ctrl-C to stop")
        # What is alive now (the model, the sampler's sockets and caches, gRPC) lives as long as
        # the servers: out of the collector's way. Its full collections scanned it all, 63-71 ms
        # with every thread stopped, every 12 s (rail8): a gNMI tick behind one came 0.3 s late.
        gc.freeze()
        until_interrupted()
    finally:
        for stop in reversed(stops):
            stop()


@click.command("diagnose")
@click.argument("words", nargs=-1, required=True, metavar="[slow-node] LAB")
@click.option("--duration", default=8.0, show_default=True, help="Seconds of probing.")
@click.option("--interval-ms", default=50, show_default=True, type=click.IntRange(10, 10000),
              help="Probe interval per path.")
@click.option("--size", default="4MiB", show_default=True, help="slow-node: allreduce size per step.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def diagnose_cmd(words, duration, interval_ms, size, as_json) -> None:
    """Rank suspect links and nodes of a running lab, with the evidence for each.

    `twin diagnose LAB` reads BGP/BFD/daemon state, compares the running configuration with
    the lab's intent (config-audit), runs the probe mesh with the probe localizer, and compares
    interface, qdisc and checksum-error counters from before and after; it answers four
    questions (a connection failure, packet loss, a configuration anomaly, not enough
    performance) and ranks the suspects. `twin diagnose slow-node LAB` finds a host whose NICs
    run slow by bisection over allreduce bandwidth between halves of the hosts, printing every
    step. Exit 1 when there is a suspect.
    """
    if words[0] == "slow-node" and len(words) != 2:
        raise click.UsageError("usage: twin diagnose slow-node LAB")
    if words[0] != "slow-node" and len(words) != 1:
        raise click.UsageError(f"unexpected {' '.join(words[1:])!r}: use `twin diagnose LAB` or "
                               "`twin diagnose slow-node LAB`")
    lab = Lab.open(words[-1], refuse_in_training="diagnose (it is a detector)")
    if words[0] == "slow-node":
        _slow_node(lab, size, as_json)
        return
    with progress() as bar:
        found = diagnose(lab, duration, interval_ms, bar)
    if as_json:
        out.print_json(json.dumps(found))
    else:
        p = found["probes"]
        out.print(f"probes: {p['sent']} sent over {p['paths']} paths, {p['lost']} lost; links no path covered: "
                  f"{', '.join(found['uncovered_links']) or 'none'}")
        for question, asked in (("connection", "A connection failure?"), ("loss", "Packet loss?"),
                                ("configuration", "A configuration anomaly?"),
                                ("performance", "Not enough performance?")):
            named = found["answers"][question]
            out.print(f"{asked:26} {'yes: ' + ', '.join(named) if named else 'no'}")
        if not found["suspects"]:
            out.print("no suspects: routing is complete, the configuration is as intended, no probe was lost, "
                      "no drop or error counter moved")
        table = Table(title="suspects, most likely first", title_justify="left")
        for column in ("#", "suspect", "score", "evidence"):
            table.add_column(column)
        for number, s in enumerate(found["suspects"], 1):
            table.add_row(str(number), s["name"], f"{s['score']:.1f}", "\n".join(s["evidence"]))
        if found["suspects"]:
            out.print(table)
    if found["suspects"]:
        sys.exit(1)


def _slow_node(lab: Lab, size: str, as_json: bool) -> None:
    try:
        size_bytes = size_sweep(size)[0]
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--size") from None

    def show(step) -> None:
        if not as_json:
            out.print(" vs ".join(f"{'+'.join(group)}: {bw / 1e6:.1f} MB/s" for group, bw in zip(step.measured,
                                                                                                 step.busbw))
                      + f"  (x{step.ratio:.2f})")

    with progress() as bar:
        search = find_slow_node(lab, size_bytes, progress=bar, on_step=show)
    if as_json:
        out.print_json(json.dumps(search.as_dict()))
    elif search.suspect:
        out.print(f"slow host: {search.suspect} (its half of the hosts ran slower at every step)")
    else:
        out.print("no slow host: the halves ran alike")
    if search.suspect:
        sys.exit(1)


@click.command("dashboard")
@click.argument("name", metavar="LAB")
@click.option("--port", default=8470, show_default=True, help="Port on 127.0.0.1 (0: any free port).")
def dashboard(name: str, port: int) -> None:
    """Serve a live page of LAB on localhost until Ctrl-C: links coloured by utilisation and
    probe loss, BGP/BFD sessions, collective step time and probe loss over the last minutes,
    active faults (not during a training session). Loss needs a probe mesh running on the lab
    (a scenario's or training session's, or `twin probe`)."""
    from twin.dashboard.collect import Collector
    from twin.dashboard.server import Dashboard
    lab = Lab.open(name)
    board = Dashboard(Collector(lab), lab.fabric, port=port)
    board.start()
    out.print(f"dashboard of lab {name}: {board.url}  (Ctrl-C to stop)")
    try:
        until_interrupted()
    finally:
        board.stop()
