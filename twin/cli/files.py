"""`twin check`, `twin schema`: the files people write, checked and described without a lab."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
from rich.markup import escape

from twin.cli.tools import out
from twin.run.check import check
from twin.run.drill import scenario_files
from twin.run.schema import SCHEMAS


def _resolve(ref: str) -> Path:
    """A path as given; a bare name: scenarios/<name>.yaml, else labs/<name>.yaml."""
    path = Path(ref)
    if path.exists() or path.is_symlink():
        return path
    (scenario,) = scenario_files([ref])
    lab = Path("labs", f"{ref}.yaml")
    return lab if not scenario.is_file() and lab.is_file() else scenario


@click.command("check")
@click.argument("files", nargs=-1, required=True, metavar="FILE...")
@click.option("--json", "as_json", is_flag=True, help="One JSON document on stdout: per file, its problems.")
def check_cmd(files: tuple[str, ...], as_json: bool) -> None:
    """Validate lab and scenario files completely, as `twin run` does before anything starts
    (a scenario: its lab, every fault target, workload, detector and expectation), without
    touching the machine. FILE is a path, or a name from scenarios/ or labs/.

    Exit 0 if every file is valid, 2 if any is not."""
    results = [check(_resolve(ref)) for ref in files]
    if as_json:
        print(json.dumps([r.to_json() for r in results], indent=1))
    else:
        for result in results:
            if result.ok:
                out.print(f"[green]ok[/]   {escape(str(result.path))} ({result.kind}: {escape(result.summary)})")
                continue
            out.print(f"[red]FAIL[/] {escape(str(result.path))} ({result.kind}): {len(result.problems)} problem(s)")
            for problem in result.problems:
                out.print(f"  {escape(str(problem))}")
    if not all(r.ok for r in results):
        sys.exit(2)


@click.command("schema")
@click.argument("kind", type=click.Choice(sorted(SCHEMAS)))
@click.option("-o", "--output", type=click.Path(path_type=Path), help="Write to this file instead of stdout.")
def schema_cmd(kind: str, output: Path | None) -> None:
    """The JSON Schema of lab or scenario files, for editors: with the YAML language server, a
    first line `# yaml-language-server: $schema=<path>` makes the editor check as you type."""
    text = json.dumps(SCHEMAS[kind](), indent=1)
    if output is None:
        print(text)
    else:
        output.write_text(text + "\n")
        out.print(f"wrote {escape(str(output))}")
