"""A scripted trainee: a level-2 session on mini (d-mini on docker) with a fixed seed, investigated only with the
commands a person would run (`twin lab show`, `twin lab exec ... nft`), answered, graded.
On both runtimes (on docker the job, the pingmesh and the trainee's commands run in containers)."""

import json
import os
import re

import pytest

from twin.lab.state import lab_dir

from .helpers import lab_name, leftovers, twin_cli

pytestmark = pytest.mark.integration
# Level 2 on mini and on d-mini: a silent drop on a leaf-spine link (on another link on each),
# 5.9 s after the job runs. The kind is the exercise; the test finds the place by investigating.
SEED = 38


def _cli(*args, env):
    return twin_cli(*args, env=env)


def _dropping_ports(name, env) -> list[tuple[str, str, int]]:
    """(switch, port, packets dropped): read off every switch's `nft list ruleset`, as a person would."""
    lab = json.loads(_cli("lab", "show", name, "--json", env=env).stdout)
    found = []
    for node in (n["name"] for n in lab["nodes"] if n["role"] != "host"):
        device = None
        for line in _cli("lab", "exec", name, node, "--", "nft", "list", "ruleset", env=env).stdout.splitlines():
            hooked = re.search(r'device "([^"]+)"', line)
            device = hooked.group(1) if hooked else device
            counted = re.search(r"counter packets (\d+) .* drop", line)
            if counted and int(counted.group(1)) > 0 and device:
                found.append((node, device, int(counted.group(1))))
    return found


def _link_of(name, port: tuple[str, str], env) -> str:
    lab = json.loads(_cli("lab", "show", name, "--json", env=env).stdout)
    for link in lab["links"]:
        for end in ("a", "b"):
            if (link[end]["node"], link[end]["ifname"]) == port:
                return f"{link['a']['node']} -- {link['b']['node']}"
    raise AssertionError(f"no link has port {port}")


def test_scripted_trainee_finds_a_silent_drop_with_counters(tmp_path, runtime, lab_ref):
    env = {**os.environ, "FABRIC_TWIN_SCORES": str(tmp_path / "scores")}
    name = lab_name(lab_ref("mini"))  # the other tier's session may run at the same time: --lab on every command
    started = _cli("train", "start", "--level", "2", "--lab", lab_ref("mini"), "--seed", str(SEED),
                   "--trainee", "scripted", "--runtime", runtime, env=env)
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        assert "Pingmesh" in started.stdout and "Briefing" in started.stdout

        # Nothing the trainee can run through twin, nor the state files, gives the answer away.
        listed = _cli("fault", "list", name, env=env)
        assert "training session is active" in listed.stdout and "silent" not in listed.stdout
        assert _cli("diagnose", name, env=env).returncode == 2
        assert _cli("fault", "clear", name, "--all", env=env).returncode == 2
        metrics = tmp_path / "metrics.jsonl"  # telemetry keeps the twin's own fault counters out
        assert _cli("telemetry", name, "--duration", "1.5", "--out", str(metrics), env=env).returncode == 0
        samples = [json.loads(line) for line in metrics.read_text().splitlines()[1:]]
        assert samples and all(s["faults"] == {} for s in samples), samples[-1]["faults"]
        for path in [lab_dir(name) / "state.json", *(lab_dir(name) / "training").glob("*")]:
            if path.is_file():
                assert "silent_drop" not in path.read_text(errors="replace"), path

        # The investigation: which switch port drops packets?
        dropping = _dropping_ports(name, env)
        assert dropping, "the counters show no drop"
        switch, port, _packets = max(dropping, key=lambda d: d[2])
        link = _link_of(name, (switch, port), env)

        wrong = _cli("train", "answer", "--kind", "bitflip", "--link", link, "--lab", name, env=env)
        assert wrong.returncode == 1 and "WRONG" in wrong.stdout and "place is right" in wrong.stdout
        hint = _cli("train", "hint", "--lab", name, env=env)
        assert hint.returncode == 0 and hint.stdout.startswith("hint 1")
        right = _cli("train", "answer", "--kind", "silent_drop", "--link", link, "--lab", name, env=env)
        assert right.returncode == 0 and "RIGHT" in right.stdout, right.stdout + right.stderr

        session = json.loads((lab_dir(name) / "training" / "session.json").read_text())
        assert session["hints"] == 1 and [a["right"] for a in session["attempts"]] == [False, True]
        history = json.loads((tmp_path / "scores" / "scripted.json").read_text())
        assert history[-1]["score"] == 100 - 15 - 10 and history[-1]["found"] == 1

        revealed = _cli("train", "reveal", "--lab", name, env=env)
        assert "silent_drop on link" in revealed.stdout and "probe-localizer named" in revealed.stdout
        scores = _cli("train", "scores", env=env)
        assert "scripted" in scores.stdout and "75" in scores.stdout
    finally:
        stopped = _cli("train", "stop", "--lab", name, env=env)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert leftovers(name) == []
