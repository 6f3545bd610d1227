"""What the tests of FRR's preloaded fixes share: the installed libfrr, the fix's skip marks, and a
script run in a child process with (or without) the fix preloaded, answering in JSON."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from twin.lab.routing.frr import preload_path

LIBFRR = Path("/usr/lib/x86_64-linux-gnu/frr/libfrr.so.0")


def needs(name: str) -> list:
    """Skip marks: the fix built, and the libfrr it is tested against installed."""
    library = preload_path(name)
    return [pytest.mark.skipif(not library.is_file(), reason=f"{library.name} is not built (make deps builds it)"),
            pytest.mark.skipif(not LIBFRR.is_file(), reason="FRR's libfrr is not installed (make deps installs it)")]


def run(script: str, name: str, preload: bool) -> dict:
    """`script` (argv[1]: libfrr's path) in a child, with fix `name` preloaded or not; its JSON output."""
    env = {"LD_PRELOAD": str(preload_path(name))} if preload else {}
    done = subprocess.run([sys.executable, "-c", script, str(LIBFRR)], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)
