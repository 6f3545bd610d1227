"""The deploy pipeline against a fake runtime: ownership is recorded before creation,
a failure midway tears down what was built, and teardown never kills what is not the lab's."""

import json
import subprocess
import sys
import time

import pytest

from twin.errors import LabStateError, RuntimeBackendError
from twin.lab import deploy, runtime
from twin.lab.files import open_lab
from twin.lab.state import LabState, Resource, lab_dir, load_state
from twin.procs import alive
from twin.progress import NullProgress

LAB = """name: fakelab
fabric: {tiers: 2, groups: 2, rails: 1, hosts_per_group: 2, spines_per_plane: 2}
runtime: fake
"""


class FakeRuntime:
    kind = "fake"
    nodes: set = set()
    fail_on_link = None

    def __init__(self, lab):
        self.lab = lab
        self.links = 0

    def resource_name(self, node):
        return f"fake-{self.lab}.{node}"

    def preflight(self, nodes):
        pass

    def create_node(self, node):
        recorded = json.loads((lab_dir(self.lab) / "state.json").read_text())["resources"]
        assert self.resource_name(node.name) in {r["name"] for r in recorded}, \
            "node created before it was recorded in the state file"
        FakeRuntime.nodes.add(node.name)

    def delete_node(self, name):
        FakeRuntime.nodes.discard(name)

    def create_link(self, link):
        self.links += 1
        if self.links == FakeRuntime.fail_on_link:
            raise RuntimeBackendError("injected failure")

    def create_links(self, links, done):
        for link in links:
            self.create_link(link)
            done()

    def netns_path(self, node):
        return "/nonexistent"

    def exec(self, node, argv, timeout=30, capture=True, input=None):
        raise NotImplementedError

    def spawn(self, node, argv, log, env=None):
        raise NotImplementedError

    def owned(self):
        return sorted(FakeRuntime.nodes)


@pytest.fixture
def fake_lab(tmp_path, run_dir, neigh_limits, monkeypatch):
    monkeypatch.setitem(runtime.RUNTIMES._entries, "fake", FakeRuntime)
    monkeypatch.setattr(deploy.preflight, "check", lambda lab: None)
    monkeypatch.setattr(deploy.netconf, "configure_sysctls", lambda *args: None)
    FakeRuntime.nodes = set()
    path = tmp_path / "fakelab.yaml"
    path.write_text(LAB)
    return open_lab(str(path))


def test_failure_midway_tears_down_everything(fake_lab):
    FakeRuntime.fail_on_link = 3
    lab, fabric = fake_lab
    with pytest.raises(RuntimeBackendError, match="injected failure"):
        deploy.up(lab, fabric)
    assert FakeRuntime.nodes == set()
    assert not lab_dir("fakelab").exists()


def test_second_up_is_refused(fake_lab):
    lab, fabric = fake_lab
    LabState(lab="fakelab", runtime="fake", lab_file="x").save()
    with pytest.raises(LabStateError, match="already up"):
        deploy.up(lab, fabric)
    assert FakeRuntime.nodes == set()


def test_down_is_idempotent(fake_lab):
    FakeRuntime.nodes = {"spine-1", "leaf-g1-r1"}  # left over without a state file
    first = deploy.down("fakelab")
    second = deploy.down("fakelab")
    assert (first.nodes_removed, second.nodes_removed) == (2, 0)
    assert FakeRuntime.nodes == set()


def test_down_shows_a_removal_phase_only_for_a_runtime_that_owns_nodes(fake_lab):
    """`twin lab down` of a namespace lab showed "removing docker nodes 1/1" with no container."""
    FakeRuntime.nodes = {"spine-1"}
    phases = []

    class Recording(NullProgress):
        def phase(self, name, total=None):
            phases.append((name, total))
    deploy.down("fakelab", Recording())
    assert [phase for phase in phases if phase[0].startswith("removing")] == [("removing fake nodes", 1)]


def _sleeper(*extra):
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", *extra])


def test_down_kills_only_processes_of_this_lab(fake_lab):
    marker = str(lab_dir("fakelab") / "nodes" / "spine-1")
    ours, foreign = _sleeper(marker), _sleeper("unrelated")
    try:
        state = LabState(lab="fakelab", runtime="fake", lab_file="x")
        state.resources = [Resource("daemon", "spine-1/bgpd", "spine-1", ours.pid),
                           Resource("daemon", "spine-1/zebra", "spine-1", foreign.pid)]  # pid reused
        state.save()
        report = deploy.down("fakelab")
        time.sleep(0.1)
        assert report.daemons_stopped == 1
        assert ours.poll() is not None
        assert alive(foreign.pid), "a process that is not the lab's was killed"
        assert load_state("fakelab") is None
    finally:
        for proc in (ours, foreign):
            proc.kill()
            proc.wait()


def test_running_takes_the_lab_down_however_the_block_ends(fake_lab, monkeypatch):
    """`with deploy.running(...)`: down after the block, also when it raises (a test's assertion,
    Ctrl-C); a bring-up that fails rolls itself back and the block never runs."""
    lab, fabric = fake_lab
    downs = []
    monkeypatch.setattr(deploy, "up", lambda *args, **kwargs: "the lab")
    monkeypatch.setattr(deploy, "down", lambda name, progress=None: downs.append(name))
    with pytest.raises(KeyboardInterrupt), deploy.running(lab, fabric) as running:
        assert running == "the lab"
        raise KeyboardInterrupt
    assert downs == ["fakelab"]

    def refused(*args, **kwargs):
        raise LabStateError("already up")

    monkeypatch.setattr(deploy, "up", refused)
    with pytest.raises(LabStateError), deploy.running(lab, fabric):
        pytest.fail("the block ran without a lab")
    assert downs == ["fakelab"]  # nothing of another's taken down
