"""Every `twin` command pays for what `twin.cli` imports: heavy libraries a command does not use
are imported where they are used (matplotlib 0.45 s, Docker's SDK 0.2 s of a 1.5 s start-up)."""

import subprocess
import sys


def test_the_cli_starts_without_matplotlib_or_the_docker_sdk():
    probe = "import sys; from twin.cli import main; print(sorted({'matplotlib', 'docker'} & set(sys.modules)))"
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]"
