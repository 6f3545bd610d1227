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

import sys

import click
from rich.markup import escape

from twin import __version__
from twin.cli.detect import detect
from twin.cli.faults import fault
from twin.cli.files import check_cmd, schema_cmd
from twin.cli.lab import cleanup, export_cmd, lab, plan_cmd
from twin.cli.run import e2e_cmd, report_cmd, run_cmd
from twin.cli.tools import console
from twin.cli.train import train
from twin.cli.workloads import bench, dashboard, diagnose_cmd, probe, telemetry
from twin.errors import TwinError
from twin.text import clipped, shown


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show tracebacks on errors.")
@click.version_option(__version__, prog_name="twin")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """fabric-twin: a network digital twin of an AI-training cluster fabric."""
    ctx.obj = {"debug": debug}


for command in (lab, fault, run_cmd, e2e_cmd, report_cmd, check_cmd, schema_cmd, export_cmd, plan_cmd, cleanup, bench,
                probe,
                telemetry, diagnose_cmd, detect, dashboard, train):
    cli.add_command(command)


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
