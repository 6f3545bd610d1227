import os
import signal
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# A shell without job control starts its background commands with SIGINT ignored, and an ignored
# signal stays ignored across exec: `make test &` from a script would then start every twin
# command the tests interrupt (Ctrl-C tests, servers they stop) deaf to SIGINT, and they would
# wait out their timeouts (a local CI run of 2026-11-29: 11 failures). Python leaves SIGINT alone
# when it starts ignored, so the tests' process takes it back: what it starts gets the default.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture
def run_dir(tmp_path, monkeypatch):
    """A private state root, so unit tests never touch /run/fabric-twin."""
    monkeypatch.setenv("FABRIC_TWIN_RUN_DIR", str(tmp_path / "run"))
    return tmp_path / "run"


@pytest.fixture
def neigh_limits(tmp_path, monkeypatch):
    """The machine's ARP table limits, as files of a private folder (unit tests never write /proc)."""
    from twin.lab import neigh
    folder = tmp_path / "neigh"
    folder.mkdir()
    for name, value in zip(neigh.LIMITS, (128, 512, 1024)):
        (folder / name).write_text(f"{value}\n")
    monkeypatch.setattr(neigh, "SYSCTL_DIR", folder)
    return folder


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config, items):
    # `make test` runs two pytest-xdist workers (--dist loadgroup). A lab's name is machine-wide:
    # the tests that bring up the shipped labs under their own names (mini, rail4: the netns
    # tier) share one worker, the docker tier (d-mini, d-rail4; it also builds the images) the
    # other. Tests that bring up copies under names of their own (marker own_labs) go to
    # whichever worker is free.
    for item in items:
        if "integration" not in item.keywords:
            continue
        if item.get_closest_marker("docker"):
            item.add_marker(pytest.mark.xdist_group("docker-tier"))
        elif not item.get_closest_marker("own_labs"):
            item.add_marker(pytest.mark.xdist_group("shipped-labs"))
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
        from twin.lab.runtime.docker import daemon_running
        if not daemon_running():
            skip = pytest.mark.skip(reason="no Docker daemon: the docker tier runs where one is started "
                                           "(`.ci/run` starts one; by hand: `dockerd &`)")
            for item in items:
                if "docker" in item.keywords:
                    item.add_marker(skip)


def pytest_collection_finish(session):
    # A pytest whose node ids drop xdist's group suffix (9.2, pytest-xdist issue 1386) would
    # spread one tier over both workers: two labs of the same name at once. Refuse instead.
    if session.config.getoption("dist", "no") == "loadgroup":
        ungrouped = [i.nodeid for i in session.items if i.get_closest_marker("xdist_group") and "@" not in i.nodeid]
        if ungrouped:
            raise pytest.UsageError(f"--dist loadgroup did not group {ungrouped[0]}: this pytest and "
                                    "pytest-xdist do not work together; use the versions pyproject.toml pins")


def pytest_sessionstart(session):
    # The tiers bring the shipped labs up under their own names (and d- copies on docker); a lab of
    # one of those names already on the machine (a user's, or one a killed run left) would fail
    # every test that brings it up, one by one, minutes in (CI of 2026-12-07: 80 of them). Say so
    # before the first, once: here, in the process that starts pytest-xdist's workers.
    config = session.config
    if hasattr(config, "workerinput") or os.geteuid() != 0 or not _runs_integration(config):
        return
    taken = _shipped_labs_on_this_machine()
    if taken:
        raise pytest.UsageError(f"lab {', '.join(taken)} is already on this machine, and the integration tests "
                                "bring up labs of that name: `twin lab down NAME` first (or run the unit tier "
                                "alone: pytest tests/unit)")


def _runs_integration(config) -> bool:
    integration = ROOT / "tests" / "integration"
    paths = [Path(a.split("::")[0]).resolve() for a in config.args] or [ROOT]
    return any(p == integration or integration in p.parents or p in integration.parents for p in paths)


def _shipped_labs_on_this_machine() -> list[str]:
    """Names of the shipped labs (and their docker tier's copies) that have state or namespaces here."""
    from ruamel.yaml import YAML

    from twin.lab.runtime.netns import NETNS_DIR, namespace_prefix
    from twin.lab.state import lab_dir
    names = []
    for path in sorted((ROOT / "labs").glob("*.yaml")):
        name = (YAML(typ="safe").load(path.read_text()) or {}).get("name")
        if isinstance(name, str):
            names += [name, "d-" + name]
    namespaces = os.listdir(NETNS_DIR) if os.path.isdir(NETNS_DIR) else []
    return [name for name in names if lab_dir(name).exists()
            or any(n.startswith(namespace_prefix(name)) for n in namespaces)]
