"""`twin run`, `twin e2e`, `twin report`: scenarios run and graded, and reports rebuilt from
results folders."""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.markup import escape
from rich.table import Table

from twin.cli.summary import print_expectations, print_summary
from twin.cli.tools import RUNTIME_OPTION, out, progress
from twin.errors import TwinError
from twin.results.publish import publish
from twin.run import runner
from twin.run.drill import run_drill, scenario_files
from twin.run.generate import DETECTORS, generate, score
from twin.run.plan import load_scenario

RESULTS_OPTION = click.option("--results", type=click.Path(path_type=Path), default=Path("results"),
                              show_default=True, help="Folder for the results (one sub-folder per run).")


@click.command("run")
@click.argument("scenario_ref", metavar="SCENARIO")
@click.option("--keep", is_flag=True, help="Run on the lab if it is already up, and leave it up afterwards.")
@RESULTS_OPTION
@click.option("--timeout", default=90.0, show_default=True, help="Seconds to wait for the lab to converge.")
@RUNTIME_OPTION
def run_cmd(scenario_ref: str, keep: bool, results: Path, timeout: float, runtime: str | None) -> None:
    """Run a scenario: lab up, traffic, faults on schedule, results; always cleaned up after.

    SCENARIO is a file or a name from scenarios/. Exit 1 if a fault could not be applied on
    schedule or an expectation failed, 2 on bad input, 130 if interrupted.
    """
    path = Path(scenario_ref)
    if not path.is_file() and Path("scenarios", f"{scenario_ref}.yaml").is_file():
        path = Path("scenarios", f"{scenario_ref}.yaml")
    plan = load_scenario(path).with_runtime(runtime)
    with progress() as bar:
        directory = runner.run(plan, results, keep=keep, progress=bar, timeout_s=timeout)
    report = publish(directory)
    print_summary(report, directory)
    if not report.passed:
        sys.exit(1)


@click.command("report")
@click.argument("folders", nargs=-1, required=True, type=click.Path(path_type=Path), metavar="DIR...")
@click.option("--quiet", is_flag=True, help="Only write the files; print nothing but errors.")
def report_cmd(folders: tuple[Path, ...], quiet: bool) -> None:
    """Rebuild report.json, junit.xml, index.html and the pictures of results folders from what
    they recorded (run.json, model.json, events.jsonl; older folders: their report.json and lab).

    Exit 1 if a rebuilt report does not pass."""
    failed = []
    for folder in folders:
        report = publish(folder)
        if not quiet:
            print_summary(report, folder)
        if not report.passed:
            failed.append(str(folder))
    if failed:
        sys.exit(1)


@click.command("e2e")
@click.argument("scenarios", nargs=-1, metavar="[SCENARIO]...")
@click.option("--quick", is_flag=True,
              help="For CI: 3 s before the first fault, 3 s after the last clear, one bring-up per lab.")
@RESULTS_OPTION
@click.option("--lab", "labs", multiple=True, metavar="LAB",
              help="Only the scenarios on this lab (repeatable); default: every lab.")
@RUNTIME_OPTION
@click.option("--generated", type=click.IntRange(1, 1000), metavar="N",
              help="Instead of scenarios/: N random labs and fault drills (written under the results folder), "
                   "then precision, recall and time to detect per fault kind and detector.")
@click.option("--seed", type=int, default=1, show_default=True, help="With --generated: the drills drawn.")
def e2e_cmd(scenarios: tuple[str, ...], quick: bool, results: Path, labs: tuple[str, ...],
            runtime: str | None, generated: int | None, seed: int) -> None:
    """The fault drill: run every scenario in scenarios/ (or the ones named, or --generated ones)
    one after another and grade every expectation. Exit 1 if any scenario failed."""
    drills = []
    if generated:
        if scenarios or labs:
            raise TwinError("--generated draws its own labs and scenarios", hint="give no SCENARIO and no --lab")
        drills = generate(generated, seed, results / f"generated-seed{seed}")
        out.print(f"generated {len(drills)} drills in {results / f'generated-seed{seed}'}")
        scenarios = tuple(str(d.scenario) for d in drills)
    files = scenario_files(scenarios)
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise TwinError(f"no such scenario: {', '.join(missing)}", hint="give files, or names from scenarios/")
    loaded = [load_scenario(f, quick=quick) for f in files]  # every file is valid before anything runs
    unknown = set(labs) - {s.fabric.name for s in loaded}
    if unknown:
        raise TwinError(f"no scenario runs on lab {', '.join(sorted(unknown))}",
                        hint="labs of the scenarios: " + ", ".join(sorted({s.fabric.name for s in loaded})))
    loaded = [s.with_runtime(runtime) for s in loaded if not labs or s.fabric.name in labs]

    def started(number: int, plan) -> None:
        out.print(f"[bold][{number}/{len(loaded)}] {plan.name}[/] on {plan.fabric.name}, {plan.spec.duration_s:g} s")

    def finished(_plan, outcome) -> None:
        if outcome.report:
            print_expectations(outcome.report)
        else:
            out.print(f"[red]ERROR[/] {escape(outcome.error)}")

    outcomes = run_drill(loaded, results, quick, progress, started, finished)
    table = Table(title="fault drill" + (" (quick)" if quick else ""))
    for column in ("scenario", "result", "expectations", "detected after", "results"):
        table.add_column(column)
    for o in outcomes:
        graded = o.report.expectations if o.report else []
        detected = sorted({f"{v} s" for d in (o.report.detectors if o.report else {}).values()
                           for v in d.detect_s.values()})
        table.add_row(o.scenario, "[green]pass[/]" if o.passed else "[red]FAIL[/]",
                      f"{sum(e.passed for e in graded)}/{len(graded)} passed" if o.report else o.error,
                      ", ".join(detected) or "-", str(o.directory or "-"))
    out.print(table)
    if drills:
        for detector in DETECTORS:
            out.print(kind_table(detector, score(drills, outcomes, detector)))
    failed = [o.scenario for o in outcomes if not o.passed]
    out.print(f"{len(outcomes) - len(failed)} of {len(outcomes)} scenarios passed" +
              (f"; failed: {', '.join(failed)}" if failed else ""))
    if failed:
        sys.exit(1)


def kind_table(detector: str, rows) -> Table:
    """A generated drill set's detection figures per fault kind, for one detector."""
    table = Table(title=f"{detector}: per fault kind", title_justify="left")
    for column in ("kind", "drills", "faults found", "precision", "recall", "detect s (median, max)", "healthy s",
                   "after end"):
        table.add_column(column)
    for row in rows:
        table.add_row(row.kind, str(row.drills), f"{row.found} of {row.faults}", str(row.precision),
                      str(row.recall), f"{row.median_s()}, {max(row.detect_s)}" if row.detect_s else "-",
                      f"{row.healthy_s:g}" if row.kind == "healthy" else "-", str(row.after_end))
    return table
