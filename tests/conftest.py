import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def run_dir(tmp_path, monkeypatch):
    """A private state root, so unit tests never touch /run/fabric-twin."""
    monkeypatch.setenv("FABRIC_TWIN_RUN_DIR", str(tmp_path / "run"))
    return tmp_path / "run"


def pytest_collection_modifyitems(config, items):
    reason = None
    if os.geteuid() != 0:
        reason = "integration tests need root (network namespaces, veth, FRR)"
    elif not Path("/usr/lib/frr/bgpd").is_file():
        reason = "integration tests need FRR: run `make deps`"
    if reason:
        skip = pytest.mark.skip(reason=reason)
        for item in items:
            if "integration" in item.keywords:
                item.add_marker(skip)
        return
    if any("docker" in item.keywords for item in items):
        from twin.runtime.docker import daemon_running
        if not daemon_running():
            skip = pytest.mark.skip(reason="no Docker daemon: the docker tier runs where one is started "
                                           "(`.ci/run` starts one; by hand: `dockerd &`)")
            for item in items:
                if "docker" in item.keywords:
                    item.add_marker(skip)
