"""`twin lab ...`, `twin export`, `twin cleanup`: build, inspect and remove labs."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import asdict
from ipaddress import ip_address
from pathlib import Path

import click
from rich.markup import escape
from rich.table import Table

from twin.cli.tools import RUNTIME_OPTION, out, progress, write_output
from twin.errors import TwinError
from twin.lab import deploy, idle
from twin.lab.bfd import client as bfd_client
from twin.lab.files import open_lab
from twin.lab.handle import Lab, lab_model
from twin.lab.kernel.nsutil import interface_indexes
from twin.lab.kernel.shaping import shaped_rate_bps
from twin.lab.ports import optics
from twin.lab.ports.counters import CounterReader
from twin.lab.routing import lldp
from twin.lab.routing.frr import vtysh_argv
from twin.lab.runtime.netns import orphan_labs
from twin.lab.state import known_labs
from twin.lab.status import as_dict, lab_status, queue_status
from twin.model import pathhash
from twin.model.describe import describe
from twin.model.nics import SAMPLE_PER_NIC, checked_pairs, fabric_nics, fabric_pairs
from twin.model.ports import peer, ports
from twin.names import is_lab_name
from twin.text import shown


@click.group()
def lab() -> None:
    """Build, inspect and remove labs (see labs/*.yaml)."""


@lab.command("up")
@click.argument("lab_ref", metavar="LAB")
@click.option("--timeout", default=60.0, show_default=True, help="Seconds to wait for convergence.")
@click.option("--all-pairs", is_flag=True,
              help=f"Check that every host NIC reaches every NIC of the other hosts (NICs squared: 63,488 "
                   f"pairs at pod128), not a sample of {SAMPLE_PER_NIC} destinations per NIC (the same on small labs).")
@RUNTIME_OPTION
@click.option("--machines", type=click.IntRange(2, 64), default=None,
              help="Split LAB over this many machines (the split `twin export --hosts N` writes) and bring up "
                   "one machine's share, a lab named LAB-mK; with --machine and --address.")
@click.option("--machine", type=click.IntRange(1, 64), default=None, help="Which machine this is (1 ... --machines).")
@click.option("--address", "addresses", multiple=True, metavar="IP[,IP...]",
              help="Every machine's underlay address, in machine order (repeat, or separate with commas): "
                   "the links to other machines are VXLAN tunnels between these.")
@click.option("--underlay", metavar="NETNS", default=None,
              help="The network namespace holding this machine's address (default: this machine's own); "
                   "on one box, each machine of a split can be a namespace.")
def lab_up(lab_ref: str, timeout: float, all_pairs: bool, runtime: str | None, machines: int | None,
           machine: int | None, addresses: tuple[str, ...], underlay: str | None) -> None:
    """Bring LAB (a name from labs/ or a path) up and wait until it has converged. With --machines,
    --machine and --address: this machine's share of LAB split over machines, converged with the others."""
    lab_file, fabric = open_lab(lab_ref)
    fabric = fabric.with_runtime(runtime)
    if machines or machine or addresses or underlay:
        fabric = _share(fabric, machines, machine, addresses, underlay)
    started = time.monotonic()
    with progress() as bar:
        lab = deploy.up(lab_file, fabric, bar, timeout_s=timeout, all_pairs=all_pairs)
    elapsed = time.monotonic() - started
    nics = fabric_nics(fabric)
    checked = sum(1 for src, _dst in checked_pairs(nics, all_pairs) if fabric.runs_here(nics[src].host))
    every = sum(1 for src, _dst in fabric_pairs(nics) if fabric.runs_here(nics[src].host))
    reached = ("no hosts on this machine" if not every else "all host NIC pairs reachable" if checked == every else
               f"{checked:,} of {every:,} host NIC pairs reachable ({SAMPLE_PER_NIC} from each NIC; "
               "--all-pairs for all)")
    hosts = [n for n in fabric.local_nodes if not n.is_switch]
    what = (f"{len(fabric.local_switches)} switches, {len(hosts)} hosts, {len(fabric.local_links)} links and "
            f"{len(fabric.seam_links)} VXLAN links to the other machines (machine {fabric.machine} of "
            f"{fabric.machines} of lab {fabric.split_of})" if fabric.machine else
            f"{len(fabric.switches)} switches, {len(fabric.hosts)} hosts ({len(nics)} NICs), {len(fabric.links)} links")
    out.print(f"[green]lab {fabric.name} is up[/] and converged in [bold]{elapsed:.1f} s[/]: {what}; "
              f"all ECMP next hops installed, {reached}.")
    out.print("  phases: " + ", ".join(f"{k} {v:.2f} s" for k, v in lab.state.timings_s.items() if k != "total"))
    local = [nic for nic in nics if fabric.runs_here(nic.host)]
    ping = (f"        twin lab exec {fabric.name} {local[0].host} -- ping -c 3 -I {local[0].address} "
            f"{nics[-1].address if nics[-1] is not local[0] else nics[0].address}\n" if local else "")
    out.print(f"  next: twin lab status {fabric.name}\n{ping}        twin lab down {fabric.name}")


def _share(fabric, machines: int | None, machine: int | None, addresses: tuple[str, ...], underlay: str | None):
    """This machine's share of the lab split over --machines (model/partition.share), its options checked."""
    from twin.model.partition import share
    if not machines or not machine:
        raise TwinError("a split lab needs --machines, --machine and --address together",
                        hint="e.g. --machines 2 --machine 1 --address 10.0.0.1,10.0.0.2")
    if machine > machines:
        raise TwinError(f"--machine {machine} is not one of the {machines} machines", hint=f"1 ... {machines}")
    if machines > len(fabric.switches):
        raise TwinError(f"{machines} machines for {len(fabric.switches)} switches", hint="fewer --machines")
    listed = machine_addresses(addresses, machines)
    if not is_lab_name(f"{fabric.name}-m{machine}"):
        raise TwinError(f"lab {fabric.name}'s share would be named {fabric.name}-m{machine}, longer than a lab "
                        f"name may be", hint="shorten the lab's name (at most 9 characters for a split)")
    if fabric.load_balance != "ecmp" or fabric.hash_offset:
        raise TwinError("a split lab routes by ECMP only: adaptive routing and hash offsets need every queue's "
                        "depth, and the machines' programs see only their own",
                        hint="routing.load_balance: ecmp and no routing.hash_offset in the lab file")
    return share(fabric, machines, machine, listed, underlay)


def machine_addresses(addresses: tuple[str, ...], machines: int) -> list[str]:
    """--address values (repeated, or comma-separated) as one IPv4 address per machine, checked."""
    listed = [part.strip() for value in addresses for part in value.split(",") if part.strip()]
    if len(listed) != machines:
        raise TwinError(f"{len(listed)} --address for {machines} machines", hint="give one per machine, in order")
    for address in listed:
        try:
            if ip_address(address).version != 4:
                raise ValueError
        except ValueError:
            raise TwinError(f"--address {address!r} is not an IPv4 address", hint="e.g. --address 10.0.1.11") from None
    if len(set(listed)) != len(listed):
        raise TwinError("two machines have the same --address", hint="each machine has its own underlay address")
    return listed


@lab.command("down")
@click.argument("name", metavar="LAB")
def lab_down(name: str) -> None:
    """Remove LAB and everything it owns (namespaces, links, daemons, files). Idempotent.
    LAB is a lab's name, or its lab file (the name written in it)."""
    if name.endswith((".yaml", ".yml")):
        name = open_lab(name)[0].spec.name
    started = time.monotonic()
    with progress() as bar:
        report = deploy.down(name, bar)
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
            "links": [{"a": {"node": link.a.node, "ifname": link.a.ifname, "address": str(link.a.address)},
                       "b": {"node": link.b.node, "ifname": link.b.ifname, "address": str(link.b.address)},
                       "kind": link.kind} for link in fabric.links]}))
        return
    click.echo(describe(fabric), nl=False)


@lab.command("status")
@click.argument("name", metavar="LAB")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--idle-window", type=click.FloatRange(0.0, 60.0), default=2.0, show_default=True,
              help="Seconds to sample the lab's CPU at rest (0: skip).")
def lab_status_cmd(name: str, as_json: bool, idle_window: float) -> None:
    """Per switch: BGP sessions, BFD peers, ECMP next hops, daemon health; the lab's CPU and memory at
    rest. Exit 1 if anything is unhealthy."""
    lab = Lab.open(name)
    state = lab.state
    cost = idle.measure(state, idle_window) if idle_window else None  # before vtysh adds its own load
    statuses = lab_status(lab)
    queues = queue_status(lab)
    bfd_plane = bfd_client.status(lab)
    if as_json:
        out.print_json(json.dumps({"switches": as_dict(statuses),
                                   "queues": asdict(queues) | {"healthy": queues.healthy},
                                   "bfd_data_plane": bfd_plane,
                                   "idle": asdict(cost) if cost else None}))
    else:
        fabric = lab.fabric
        share = (f", machine {fabric.machine} of {fabric.machines} of lab {fabric.split_of}: "
                 f"{len(fabric.seam_links)} VXLAN links to the others" if fabric.machine else "")
        table = Table(title=f"lab {name} ({state.status}{share})")
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
        print_queues(queues, split=bool(fabric.machine))
        print_bfd_data_plane(bfd_plane)
        if cost:
            print_idle(cost)
    if not all(s.healthy for s in statuses) or not queues.healthy or (bfd_plane and not bfd_plane["running"]):
        sys.exit(1)


def print_bfd_data_plane(plane: dict | None) -> None:
    if plane is None:
        out.print("BFD: each switch's bfdd sends its own packets (routing.bfd.offload: false, or a docker lab)")
    elif not plane["running"]:
        out.print("BFD: [red]the lab's BFD data plane is not running[/]: no switch sends or hears BFD, every "
                  "session goes down (`twin lab down` and up again)")
    else:
        kernel = (f" ({plane['in_kernel']} in the kernel's fast path)" if plane["fast_path"] else
                  " (no fast path: every packet in the data plane)")
        out.print(f"BFD: offloaded to the lab's data plane: {plane['up']}/{plane['sessions']} sessions up{kernel}, "
                  f"{plane['tx_packets']} packets sent and {plane['rx_packets']} received since it started, "
                  f"{plane['cpu_s']:.1f} s of CPU")


def print_idle(cost: idle.IdleCost) -> None:
    programs = ", ".join(f"{k} {v:.2f}" for k, v in cost.by_program.items())
    out.print(f"at rest ({cost.window_s:g} s): the lab's processes {cost.cores:.2f} of {cost.machine_cores} cores "
              f"({programs or 'none'}); machine busy {cost.machine_busy_cores:.2f} cores; memory {cost.memory_mib:.0f} "
              f"MiB, {cost.switch_memory_mib:.1f} MiB per switch")
    for warning in cost.warnings:
        out.print(f"[yellow]warning:[/] {warning}")


def print_queues(queues, split: bool = False) -> None:
    marking = (f"; ECN marking from {queues.marking[0]} to {queues.marking[1]} bytes (p {queues.marking[2]:g})"
               if queues.marking else "; no ECN marking")
    if (queues.lossless or queues.marking) and not queues.controller:
        out.print("queues: [red]the PFC controller is not running[/]: ports are neither paused nor resumed, "
                  "marks are not counted (`twin lab down` and up again)")
    elif not queues.lossless:
        why = "a split lab's share" if split else "links.pfc: false"
        out.print(f"queues: lossy ({why}): a full queue drops" + marking)
    else:
        reaction = queues.reaction
        out.print(f"queues: lossless (PFC){marking}; controller reaction p50 {reaction.get('p50_us', '-')} us, "
                  f"p99 {reaction.get('p99_us', '-')} us over {reaction.get('events', 0)} events")
    if queues.ports:
        table = Table(title="ports that paused, were paused, went above XOFF, marked, dropped or had packets "
                            "moved by adaptive routing (since the lab came up); held late: packets above the "
                            "buffer while the emulator's pause was late")
        for column in ("port", "pauses received", "XOFF sent", "paused s", "held now", "queue now",
                       "queue peak", "above XOFF", "ECN marked", "moved in / away", "queue drops", "watchdog",
                       "held late"):
            table.add_column(column)
        for row in queues.ports:
            drops, moved = row["queue_drops"], (row["steered_in"], row["steered_away"])
            table.add_row(row["port"], str(row["rx_pause"]), str(row["tx_pause"]), f"{row['paused_s']:.3f}",
                          "[yellow]yes[/]" if row["paused"] else "", str(row["queue"]), str(row["queue_peak"]),
                          str(row["xoff_times"]), str(row["ecn_marked"]),
                          f"{moved[0]} / {moved[1]}" if any(moved) else "",
                          f"[red]{drops}[/]" if drops else "0",
                          str(row["watchdog"] or ""), f"[yellow]{row['late']}[/]" if row.get("late") else "")
        out.print(table)
    for error in queues.errors[-3:]:
        out.print(f"PFC controller: {error}")


@lab.command("ports")
@click.argument("name", metavar="LAB")
@click.argument("node", required=False)
@click.option("--problems", is_flag=True,
              help="Only ports with errors, drops, a speed below the lab's or an optic below its warning.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def lab_ports(name: str, node: str | None, problems: bool, as_json: bool) -> None:
    """What every port's hardware shows (or NODE's): its speed, packet counters, receive errors with
    the frame-check (CRC) errors among them, drops, and its optic's transmit and receive power and
    temperature, as `ethtool`, a switch's `show interfaces counters errors` and `show interfaces
    transceiver` do. Counters are since the lab came up."""
    lab = Lab.open(name)
    if node is not None and node not in lab.fabric.nodes:
        raise TwinError(f"lab {name} has no node '{node}'", hint="see `twin lab show " + name + "`")
    rows = port_rows(lab, [node] if node else None)
    line_mbps = lab.fabric.rate_bps / 1e6
    if problems:
        rows = [r for r in rows if r["rx_low"] or r["rx_errors"] or r["rx_crc_errors"] or r["rx_dropped"]
                or r["tx_dropped"] or (r["speed_mbps"] or line_mbps) < 0.99 * line_mbps]
    if as_json:
        out.print_json(json.dumps(rows))
        return
    table = Table(title=f"ports of {node or 'lab ' + name}: counters since the lab came up; optics now "
                        f"(receive power low below {optics.RX_LOW_WARNING_DBM:g} dBm)", title_justify="left")
    for column in ("port", "to", "Mbit/s", "rx packets", "tx packets", "rx errors", "CRC errors", "rx dropped",
                   "tx dropped", "tx dBm", "rx dBm", "°C"):
        table.add_column(column)
    for r in rows:
        table.add_row(f"{r['node']} {r['ifname']}", r["peer"], f"{r['speed_mbps']:g}" if r["speed_mbps"] else "-",
                      str(r["rx_packets"]), str(r["tx_packets"]),
                      str(r["rx_errors"]), f"[red]{r['rx_crc_errors']}[/]" if r["rx_crc_errors"] else "0",
                      str(r["rx_dropped"]), str(r["tx_dropped"]), f"{r['tx_dbm']:.2f}",
                      f"[red]{r['rx_dbm']:.2f} low[/]" if r["rx_low"] else f"{r['rx_dbm']:.2f}",
                      f"{r['temperature_c']:.1f}")
    out.print(table if rows else "no port to show")


def port_rows(lab: Lab, nodes: list[str] | None) -> list[dict]:
    fabric = lab.fabric
    with CounterReader(lab, nodes) as reader:
        counters = reader.read(checksums=False, qdiscs=False).interfaces
    readings = optics.readings(lab)
    rows = []
    speeds: dict[str, dict[str, int | None]] = {}
    for port in ports(fabric):
        if nodes and port.node not in nodes:
            continue
        if port.node not in speeds:  # the port's shaped rate: its speed, as `ethtool` shows a NIC's
            with lab.netlink(port.node) as ipr:
                speeds[port.node] = {name: shaped_rate_bps(ipr, index)
                                     for name, index in interface_indexes(lab.netns(port.node)).items()}
        far = peer(fabric, port)
        values = counters.get((port.node, port.ifname), {})
        speed = speeds[port.node].get(port.ifname)
        rows.append({"node": port.node, "ifname": port.ifname, "peer": f"{far.node} {far.ifname}",
                     "speed_mbps": round(speed / 1e6, 1) if speed else None,
                     **{k: values.get(k, 0) for k in ("rx_packets", "tx_packets", "rx_errors", "rx_crc_errors",
                                                      "rx_dropped", "tx_dropped")},
                     **{k: v for k, v in readings[port].as_dict().items() if k not in ("node", "ifname")}})
    return rows


@lab.command("exec", context_settings={"ignore_unknown_options": True})
@click.argument("name", metavar="LAB")
@click.argument("node")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def lab_exec(name: str, node: str, command: tuple[str, ...]) -> None:
    """Run COMMAND inside NODE of LAB; its exit code is passed through.

    Use `--` before the command. `vtysh` on a switch talks to that switch's FRR, `lldpcli` to the
    node's lldpd (e.g. `lldpcli show neighbors`: who is cabled to each port).
    """
    lab = Lab.open(name)
    if node not in lab.fabric.nodes:
        raise TwinError(f"lab {name} has no node '{node}'", hint="see `twin lab show " + name + "`")
    argv = list(command)
    if argv[0] == "vtysh":
        argv = vtysh_argv(lab, node) + argv[1:]
    elif argv[0] == lldp.LLDPCLI:
        if not lab.fabric.lldp:
            raise TwinError(f"lab {name} runs no LLDP", hint="set `lldp: true` in its lab file")
        # lldpcli only talks to lldpd's socket, a file: it runs here, so a container needs none
        sys.exit(subprocess.run(lldp.lldpcli_argv(lab, node) + argv[1:]).returncode)
    result = lab.runtime.exec(node, argv, timeout=None, capture=False)
    sys.exit(result.rc)


@lab.command("path")
@click.argument("lab_ref", metavar="LAB")
@click.argument("src")
@click.argument("dst")
@click.option("--protocol", type=click.Choice(sorted(pathhash.PROTOCOLS)), default="udp", show_default=True)
@click.option("--sport", type=click.IntRange(0, 65535), default=49152, show_default=True,
              help="Source port (its low byte is the offset unless --offset is given).")
@click.option("--dport", type=click.IntRange(0, 65535), default=4791, show_default=True, help="Destination port.")
@click.option("--offset", type=click.IntRange(0, pathhash.OFFSET_MASK), default=None,
              help="Path offset: written into the source port's low byte.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def lab_path(lab_ref: str, src: str, dst: str, protocol: str, sport: int, dport: int, offset: int | None,
             as_json: bool) -> None:
    """The path a packet from SRC to DST takes on LAB with routing.hash_offset (a running lab by
    name, else a lab file; from the model, no root needed). SRC and DST: a host NIC's address or
    HOST:NIC. Two offsets that differ by one share no spine and no superspine."""
    fabric = lab_model(lab_ref)
    if not fabric.hash_offset:
        raise TwinError(f"lab {fabric.name} hashes with the kernel's ECMP (keyed per switch): its paths are not "
                        "known in advance", hint="set `routing.hash_offset: true` in the lab file")
    addresses = {f"{host}:{end.ifname}": end.address.ip for host, end in fabric.host_nics()}
    known = set(addresses.values())

    def address(text: str):
        if text in addresses:
            return addresses[text]
        try:
            found = ip_address(text)
        except ValueError:
            found = None
        if found not in known:
            raise TwinError(f"{text!r} is no host NIC of lab {fabric.name}",
                            hint="an address or HOST:NIC from `twin lab show " + fabric.name + "`, e.g. "
                                 + next(iter(addresses)))
        return found

    if offset is not None:
        sport = pathhash.with_offset(sport, offset)
    hops = pathhash.path(fabric, address(src), address(dst), pathhash.PROTOCOLS[protocol], sport, dport)
    if as_json:
        out.print_json(json.dumps({"sport": sport, "offset": sport & pathhash.OFFSET_MASK,
                                   "hops": [{"node": h.node, "egress": h.egress.ifname if h.egress else None}
                                            for h in hops]}))
        return
    click.echo(f"{protocol} {src} -> {dst}, source port {sport} (offset {sport & pathhash.OFFSET_MASK}), "
               f"destination port {dport}:")
    for hop in hops:
        click.echo(f"  {hop.node}" + (f"  out {hop.egress.ifname}" if hop.egress else ""))


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
        raise TwinError(f"cannot write {shown(output)}: unknown picture format", hint="use a .png or .svg file name")
    write_output(output, lambda path: draw(fabric, path))
    out.print(f"wrote {escape(shown(output))}")



@lab.command("drain")
@click.argument("name", metavar="LAB")
@click.argument("link")
def lab_drain(name: str, link: str) -> None:
    """Take LINK ("a -- b") out of service: shut its BGP session on both ends, as a controller
    isolates a bad link. Traffic moves to the other ECMP members; the link stays up."""
    from twin.mitigate.drain import drain
    key = drain(Lab.open(name, refuse_in_training="draining links by hand"), link)
    out.print(f"drained {key}; restore it with `twin lab undrain {name} \"{key}\"`")


@lab.command("undrain")
@click.argument("name", metavar="LAB")
@click.argument("link", required=False)
@click.option("--all", "undrain_all", is_flag=True, help="Every drained link.")
def lab_undrain(name: str, link: str | None, undrain_all: bool) -> None:
    """Put a drained LINK (or --all) back into service (after the repair)."""
    from twin.mitigate.drain import undrain
    lab = Lab.open(name, refuse_in_training="draining links by hand")
    if bool(link) == undrain_all:
        raise TwinError("give a LINK or --all", hint=f"drained: {', '.join(lab.state.drains) or 'none'}")
    for key in list(lab.state.drains) if undrain_all else [link]:
        out.print(f"undrained {undrain(lab, key)}")


MACHINES_OPTION = click.option("--hosts", "machines", type=click.IntRange(1, 64), default=1, show_default=True,
                               help="Machines to split the lab over.")


@click.command("export")
@click.argument("lab_ref", metavar="LAB")
@click.option("--format", "fmt", type=click.Choice(["containerlab"]), default="containerlab", show_default=True)
@click.option("--out", "folder", type=click.Path(path_type=Path), required=True, help="Folder to write (created).")
@MACHINES_OPTION
@click.option("--address", "addresses", multiple=True, metavar="IP[,IP...]",
              help="Each machine's address for the VXLAN links, in machine order (repeat, or separate with "
                   "commas; default: 192.0.2.1, ...).")
def export_cmd(lab_ref: str, fmt: str, folder: Path, machines: int, addresses: tuple[str, ...]) -> None:
    """Write LAB as a containerlab topology (<lab>.clab.yml, one folder of FRR configs per switch),
    for a twin larger than one machine: containerlab's multi-host mode or clabernetes. With --hosts N,
    one folder per machine (machine-1 ...): its nodes, and its links to the others as vxlan-stitch."""
    from twin.model.export import DOC_ADDRESSES, problems, topology, write, write_split
    from twin.model.partition import split
    _lab, fabric = open_lab(lab_ref)
    addresses = tuple(machine_addresses(addresses, machines)) if addresses else ()
    if machines > len(fabric.switches):
        raise TwinError(f"{machines} machines for {len(fabric.switches)} switches", hint="fewer --hosts")
    _check_export_folder(folder, fabric.name)
    where = split(fabric, machines) if machines > 1 else None
    for machine in range(machines):
        found = problems(topology(fabric, where, machine, list(addresses)))
        if found:
            raise TwinError(f"the export breaks containerlab's rules: {found[0]}", hint=f"{len(found)} problem(s)")
    if machines == 1:
        path = folder / f"{fabric.name}.clab.yml"
        write_output(folder, lambda target: write(fabric, target))
        out.print(f"wrote {path} ({len(fabric.nodes)} nodes, {len(fabric.links)} links) and FRR configs for "
                  f"{len(fabric.switches)} switches; deploy with `containerlab deploy -t {path}`")
        return
    paths: list[Path] = []
    write_output(folder, lambda target: paths.extend(write_split(fabric, target, machines, list(addresses))))
    for path in paths:
        out.print(f"wrote {escape(shown(path))}")
    print_plan(fabric, where, machines)
    if not addresses:
        out.print(f"the VXLAN remotes are placeholders ({DOC_ADDRESSES}1 ...): give the machines' addresses "
                  f"with --address, one per machine")
    out.print("deploy: on machine k, `containerlab deploy -t machine-k/<lab>.clab.yml` (docs/containerlab.md)")


def _check_export_folder(folder: Path, lab: str) -> None:
    """An export writes into a new or empty folder, or over an earlier export of the same lab; never
    into a folder of other files (`--out /etc` as root would have written a config folder per switch)."""
    if folder.exists() and not folder.is_dir():
        raise TwinError(f"--out {shown(folder)} is a file, not a folder", hint="name a new folder")
    earlier = (folder / f"{lab}.clab.yml").is_file() or (folder / "machine-1" / f"{lab}.clab.yml").is_file()
    if folder.is_dir() and not earlier and any(folder.iterdir()):
        raise TwinError(f"--out {shown(folder)} holds other files, not an export of lab {lab}",
                        hint="name a new or empty folder (it is created)")


@click.command("plan")
@click.argument("lab_ref", metavar="LAB")
@MACHINES_OPTION
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def plan_cmd(lab_ref: str, machines: int, as_json: bool) -> None:
    """Estimate, per machine, what LAB split over --hosts machines runs and costs at rest (CPU,
    memory), from the costs measured per BFD packet, BGP session and switch."""
    from twin.model.partition import split
    _lab, fabric = open_lab(lab_ref)
    if machines > len(fabric.switches):
        raise TwinError(f"{machines} machines for {len(fabric.switches)} switches", hint="fewer --hosts")
    where = split(fabric, machines)
    if as_json:
        out.print_json(json.dumps([asdict(e) for e in idle.machine_estimates(fabric, where, machines, offload=False)]))
        return
    print_plan(fabric, where, machines)


def print_plan(fabric, where: dict[str, int], machines: int) -> None:
    table = Table(title=f"{fabric.name} over {machines} machine(s): at rest, BFD every {fabric.bfd_interval_ms} ms")
    for column in ("machine", "switches", "hosts", "local links", "VXLAN links", "BFD sessions", "CPU at rest (cores)",
                   "FRR memory (MiB)"):
        table.add_column(column)
    for e in idle.machine_estimates(fabric, where, machines, offload=False):  # the export runs bfdd's own
        table.add_row(str(e.machine), str(e.switches), str(e.hosts), str(e.local_links), str(e.vxlan_links),
                      str(e.bfd_sessions), f"{e.cores:.2f}", f"{e.memory_mib:.0f}")
    out.print(table)


@click.command()
def cleanup() -> None:
    """Remove every lab this tool owns on this machine (and nothing else)."""
    from twin.lab.runtime.docker import container_labs  # Docker's SDK only where it is asked

    labs = set(known_labs())
    labs |= orphan_labs() | container_labs()
    if not labs:
        out.print("nothing to clean up")
    for name in sorted(labs):
        report = deploy.down(name)
        out.print(f"removed lab {name}: {report.nodes_removed} nodes, {report.daemons_stopped} daemons")

