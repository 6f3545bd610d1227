"""`twin check`, `twin schema`: the files people write, checked and described without a lab."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
from rich.markup import escape

from twin.cli.tools import out, write_output
from twin.errors import MAX_PROBLEMS_LISTED, MAX_PROBLEMS_SHOWN
from twin.run.check import Checked, check
from twin.run.drill import scenario_files
from twin.run.schema import SCHEMAS
from twin.spec.yamlsrc import MAX_FILE_BYTES
from twin.text import shown

STDIN = "-"


def _resolve(ref: str) -> Path:
    """A path as given; a bare name: scenarios/<name>.yaml, else labs/<name>.yaml."""
    path = Path(ref)
    if path.exists() or path.is_symlink() or "/" in ref or ref.endswith((".yaml", ".yml")):
        return path
    (scenario,) = scenario_files([ref])
    lab = Path("labs", f"{ref}.yaml")
    return lab if not scenario.is_file() and lab.is_file() else scenario


def _check_ref(ref: str) -> Checked:
    if ref == STDIN:  # read once, bounded: a lab path in it is relative to the working folder
        return check(Path("<stdin>"), sys.stdin.buffer.read(MAX_FILE_BYTES + 1))
    return check(_resolve(ref))


@click.command("check")
@click.argument("files", nargs=-1, required=True, metavar="FILE...")
@click.option("--json", "as_json", is_flag=True, help="One JSON document on stdout: per file, its problems.")
def check_cmd(files: tuple[str, ...], as_json: bool) -> None:
    """Validate lab and scenario files completely, as `twin run` does before anything starts
    (a scenario: its lab, every fault target, workload, detector and expectation), without
    touching the machine. FILE is a path, a name from scenarios/ or labs/, or - (standard input).

    Exit 0 if every file is valid, 2 if any is not (3: a bug in twin, said per file)."""
    results = [_check_ref(ref) for ref in files]
    if as_json:
        print(json.dumps([r.to_json() for r in results], indent=1))
    else:
        for result in results:
            path = escape(shown(result.path))
            if result.ok:
                out.print(f"[green]ok[/]   {path} ({result.kind}: {escape(shown(result.summary))})")
                continue
            count = result.count
            out.print(f"[red]FAIL[/] {path} ({result.kind}): {count} problem{'s' if count > 1 else ''}")
            for problem in result.problems[:MAX_PROBLEMS_SHOWN]:
                out.print(f"  {escape(str(problem))}")  # Problem escapes the file's own text
            if count > MAX_PROBLEMS_SHOWN:
                out.print(f"  ... and {count - MAX_PROBLEMS_SHOWN} more problems (--json lists the first "
                          f"{MAX_PROBLEMS_LISTED})")
    if any(r.kind == "error" for r in results):
        sys.exit(3)
    if not all(r.ok for r in results):
        sys.exit(2)


@click.command("schema")
@click.argument("kind", type=click.Choice(sorted(SCHEMAS)))
@click.option("-o", "--output", type=click.Path(path_type=Path, dir_okay=False),
              help="Write to this file instead of stdout.")
def schema_cmd(kind: str, output: Path | None) -> None:
    """The JSON Schema of lab or scenario files, for editors: with the YAML language server, a
    first line `# yaml-language-server: $schema=<path>` makes the editor check as you type."""
    text = json.dumps(SCHEMAS[kind](), indent=1)
    if output is None:
        print(text)
    else:
        write_output(output, lambda path: path.write_text(text + "\n"))
        out.print(f"wrote {escape(shown(output))}")
