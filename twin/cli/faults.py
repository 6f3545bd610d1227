"""`twin fault ...`: the fault kinds, and injecting, listing and clearing faults on a running lab."""

from __future__ import annotations

import json
import time
from pathlib import Path

import click
from rich.table import Table

from twin.cli.tools import out
from twin.errors import TwinError
from twin.faults import engine
from twin.faults.base import FaultContext
from twin.faults.registry import FAULTS
from twin.lab.handle import Lab
from twin.names import lab_name
from twin.spec.yamlsrc import parse_yaml


@click.group()
def fault() -> None:
    """Inject, list and clear faults on a running lab; `twin fault kinds` lists what can go wrong."""


def _context(name: str) -> FaultContext:
    return FaultContext(Lab.open(name, refuse_in_training="changing faults by hand"))


def _param_value(key: str, text: str):
    """VALUE of `-p KEY=VALUE`, read by the scenario files' own YAML reader (no aliases, tags,
    endless numbers; an error names the option)."""
    data, source = parse_yaml(Path(f"-p {key}"), f"value: {text}\n".encode())
    if (refused := source.refusal()) is not None:
        raise refused
    return data.get("value")


@fault.command("kinds")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def fault_kinds(as_json: bool) -> None:
    """Every fault kind: where it sits (a link or a node), its keys, what it does, its runbook."""
    rows = [{"kind": name, "place": kind.place, "keys": sorted(kind.params.model_fields),
             "summary": kind.summary, "runbook": str(kind.runbook)} for name, kind in FAULTS.items()]
    if as_json:
        out.print_json(json.dumps(rows))
        return
    table = Table(title="fault kinds (scenario `faults:` entries, or `twin fault inject LAB KIND`)")
    for column in ("kind", "on a", "keys", "what it does"):
        table.add_column(column)
    for row in rows:
        table.add_row(row["kind"], row["place"], ", ".join(row["keys"]), row["summary"])
    out.print(table)
    out.print("runbooks (symptoms, what reveals it, mitigation): docs/runbooks/<kind>.md")


@fault.command("inject", epilog=f"Kinds: {', '.join(FAULTS.names())} (`twin fault kinds` says what each does).")
@click.argument("name", metavar="LAB")
@click.argument("kind")
@click.option("--id", "fault_id", help="Name of the fault (default: the kind).")
@click.option("--link", help='The link, "node-a -- node-b".')
@click.option("--node", help="The node (switch or host) for node faults.")
@click.option("--direction", type=click.Choice(["a_to_b", "b_to_a", "both"]), help="Link faults: which way.")
@click.option("-p", "--param", "params", multiple=True, metavar="KEY=VALUE",
              help="A kind-specific key, e.g. -p loss_pct=2 (repeatable).")
def fault_inject(name, kind, fault_id, link, node, direction, params) -> None:
    """Inject a fault of KIND into LAB now; it stays until `twin fault clear`."""
    lab_name(name)  # the lab and the kind first: the fault's id defaults to the kind
    FAULTS.get(kind)
    entry = {"id": fault_id or kind.replace("_", "-"), "kind": kind}
    for key, value in (("link", link), ("node", node), ("direction", direction)):
        if value is not None:
            entry[key] = value
    for item in params:
        if "=" not in item:
            raise TwinError(f"-p {item}: expected KEY=VALUE", hint="e.g. -p loss_pct=2")
        key, value = item.split("=", 1)
        entry[key] = _param_value(key, value)
    timing, fault_params = engine.parse(entry)
    engine.inject(_context(name), timing, fault_params)
    out.print(f"fault {timing.id} ({timing.kind}) applied to lab {name}; clear with "
              f"`twin fault clear {name} {timing.id}`")


@fault.command("list")
@click.argument("name", metavar="LAB")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def fault_list(name: str, as_json: bool) -> None:
    """List the faults active on LAB."""
    faults = Lab.open(name).visible_faults()
    if faults is None:
        out.print(f"a training session is active on lab {name}: its faults are hidden "
                  "(`twin train reveal` shows them)")
        return
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
    if bool(fault_id) == clear_all:
        raise TwinError("give a fault ID or --all", hint=f"see `twin fault list {name}`")
    ctx = _context(name)
    cleared = engine.clear_all(ctx) if clear_all else [engine.clear(ctx, fault_id)]
    for entry in cleared:
        report = entry["record"].get("report")
        out.print(f"cleared {entry['id']} ({entry['kind']})" + (f": {report}" if report else ""))
