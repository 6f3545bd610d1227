"""Every `twin` command pays for what `twin.cli` imports: a command's module is imported when that
command runs (twin/cli/__init__.py COMMANDS), and heavy libraries a command does not use are
imported where they are used (matplotlib 0.45 s, Docker's SDK 0.2 s, pyroute2 0.1 s)."""

import json
import subprocess
import sys

import click
from click.testing import CliRunner

from twin.cli import COMMANDS, cli


def _loaded(code: str, names: set[str]) -> list[str]:
    """Which of `names` are imported once `code` has run (in a new interpreter)."""
    probe = f"import json, sys; {code}; print(json.dumps(sorted(set({sorted(names)!r}) & set(sys.modules))))"
    output = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    return json.loads(output.splitlines()[-1])


def test_the_cli_starts_without_matplotlib_the_docker_sdk_or_any_command():
    heavy = {"matplotlib", "docker", "pyroute2"} | {where.split(":")[0] for where in COMMANDS.values()}
    assert _loaded("from twin.cli import main", heavy) == []


def test_a_command_imports_its_own_module_and_no_other():
    modules = {where.split(":")[0] for where in COMMANDS.values()}
    code = "from twin.cli import cli; cli(['check', '--help'], standalone_mode=False)"
    assert _loaded(code, modules) == ["twin.cli.files"]


def test_every_command_is_found_by_its_own_name():
    for name in COMMANDS:
        command = cli.get_command(click.Context(cli), name)
        assert isinstance(command, click.Command) and command.name == name, name
    listed = CliRunner().invoke(cli, ["--help"]).output
    assert all(f"  {name} " in listed for name in COMMANDS)
    assert cli.get_command(click.Context(cli), "no-such-command") is None
