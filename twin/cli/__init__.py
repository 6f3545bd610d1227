"""The `twin` command: a thin layer over the library (click + rich), one module per command group.

lab.py        twin lab ..., twin export, twin cleanup
faults.py     twin fault ...
run.py        twin run, twin e2e, twin report
files.py      twin check, twin schema
workloads.py  twin bench, twin probe, twin telemetry, twin diagnose, twin dashboard
detect.py     twin detect replay
train.py      twin train ...
"""

from __future__ import annotations

import importlib
import sys

import click
from rich.markup import escape

from twin import __version__
from twin.cli.tools import console
from twin.errors import TwinError
from twin.text import clipped, shown

# Each command's module is imported when that command runs (or `twin --help` lists them all):
# importing every one cost each `twin` command 0.8 s of start-up, more than `twin check` takes.
COMMANDS = {
    "lab": "twin.cli.lab:lab",
    "fault": "twin.cli.faults:fault",
    "run": "twin.cli.run:run_cmd",
    "e2e": "twin.cli.run:e2e_cmd",
    "report": "twin.cli.run:report_cmd",
    "check": "twin.cli.files:check_cmd",
    "schema": "twin.cli.files:schema_cmd",
    "export": "twin.cli.lab:export_cmd",
    "plan": "twin.cli.lab:plan_cmd",
    "cleanup": "twin.cli.lab:cleanup",
    "bench": "twin.cli.workloads:bench",
    "probe": "twin.cli.workloads:probe",
    "telemetry": "twin.cli.workloads:telemetry",
    "diagnose": "twin.cli.workloads:diagnose_cmd",
    "dashboard": "twin.cli.workloads:dashboard",
    "detect": "twin.cli.detect:detect",
    "train": "twin.cli.train:train",
}


class LazyGroup(click.Group):
    """A group whose commands (COMMANDS: name -> "module:attribute") are imported when asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        where = COMMANDS.get(cmd_name)
        if where is None:
            return None
        module, attribute = where.split(":")
        return getattr(importlib.import_module(module), attribute)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show tracebacks on errors.")
@click.version_option(__version__, prog_name="twin")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """fabric-twin: a network digital twin of an AI-training cluster fabric."""
    ctx.obj = {"debug": debug}


def main() -> None:
    """Every outcome is one of: done (0), failed as reported (1), refused with `error:` and `hint:`
    (2), interrupted (130), or a bug in twin (3: one line naming it; the traceback with --debug).
    Whatever a message quotes of the user's input is escaped (twin/text.py)."""
    debug = "--debug" in sys.argv
    try:
        cli(standalone_mode=False)
    except click.exceptions.Abort:
        console.print("aborted")
        sys.exit(130)
    except click.ClickException as exc:
        exc.message = shown(exc.message, keep_newlines=True)  # it quotes the bad argument
        exc.show()
        sys.exit(exc.exit_code)
    except TwinError as exc:
        if debug:
            raise
        console.print("[bold red]error:[/] " + escape(shown(exc.message, keep_newlines=True)))
        if exc.hint:
            console.print("[bold]hint:[/] " + escape(shown(exc.hint, keep_newlines=True)))
        sys.exit(2)
    except KeyboardInterrupt:
        console.print("interrupted")
        sys.exit(130)
    except Exception as exc:  # noqa: BLE001 (the last line of defence: a bug, said in one line)
        if debug:
            raise
        console.print(f"[bold red]error:[/] internal error ({type(exc).__name__}): "
                      + escape(clipped(shown(exc), 300)))
        console.print("[bold]hint:[/] this is a bug in twin: rerun with --debug for the traceback and report it")
        sys.exit(3)
