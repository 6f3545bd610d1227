"""`twin detect replay`: the probe localizers run again on a recorded run's probes.jsonl (a 5 %
silent drop on mini, tests/data/results/replay-drop, recorded with its scenario.yaml, both
localizers live). mini's two leaves make the case ambiguous: every probed path over the faulty
leaf-spine link crosses the other leaf's link to that spine, so probe-likelihood names the two
as a set, which the grading counts right because the run's probe plan recorded them as a class
it cannot tell apart. Two faults at once on rail4 (replay-two): each named, no link beside them.
transport-state on a gloo job's recorded connection states (replay-transport)."""

import gzip
import json
import shutil
from pathlib import Path

import pytest

from twin.errors import TwinError
from twin.results.replay import replay

RESULTS = Path(__file__).resolve().parents[1] / "data" / "results"
DATA = RESULTS / "replay-drop"


def recorded(into: Path, keep_sample=lambda sample: True, name: str = "replay-drop") -> Path:
    """A recorded folder, its probes (or transport-state's rows) filtered by `keep_sample`."""
    data, folder = RESULTS / name, into / name
    folder.mkdir(parents=True)
    for file in ("run.json", "model.json"):
        shutil.copy(data / file, folder / file)
    (folder / "events.jsonl").write_bytes(gzip.decompress((data / "events.jsonl.gz").read_bytes()))
    evidence, items = ("probes.jsonl", "samples") if (data / "probes.jsonl.gz").exists() else ("transport.jsonl", "qps")
    with open(folder / evidence, "w") as out:
        for line in gzip.decompress((data / f"{evidence}.gz").read_bytes()).decode().splitlines():
            row = json.loads(line)
            row[items] = [s for s in row[items] if keep_sample(s)]
            out.write(json.dumps(row) + "\n")
    return folder


@pytest.mark.parametrize("detector", ["probe-localizer", "probe-likelihood"])
def test_replay_names_the_fault_like_the_live_run(tmp_path, detector):
    result = replay(recorded(tmp_path), detector)
    assert result.intervals > 50
    assert result.faults == 1
    assert result.live is not None and result.live.right >= 1  # the run graded it live
    assert (result.replayed.right, result.replayed.wrong, result.replayed.recall) == (1, 0, 1.0)
    # as soon as live, within an interval (a replay counts each at its end plus the grace)
    assert abs(result.replayed.detect_s["bad-optic"] - result.live.detect_s["bad-optic"]) < 0.5
    assert result.replayed.candidates == ({"bad-optic": 2} if detector == "probe-likelihood" else {})


def test_replay_without_the_lossy_paths_names_nothing(tmp_path):
    """The evidence decides: take the lost probes out and the fault goes unnamed."""
    result = replay(recorded(tmp_path, keep_sample=lambda s: s["received"] + s["held"] >= s["sent"]))
    assert (result.replayed.verdicts, result.replayed.recall) == (0, 0.0)


def test_replay_refuses_what_it_cannot_replay(tmp_path):
    folder = recorded(tmp_path)
    with pytest.raises(TwinError, match="unknown builtin detector") as info:
        replay(folder, "probe-localiser")
    assert "did you mean 'probe-localizer'" in info.value.hint
    (folder / "probes.jsonl").write_text('{"t": 1.0, "samples": [{"src": 1}]}\n')
    with pytest.raises(TwinError, match="an interval at t=1.0 is not a probe interval"):
        replay(folder)
    (folder / "probes.jsonl").write_text('{"t": 1.0, "samples": []}\n{"t": 1.5, "sam')  # cut by a crash
    assert replay(folder).damaged == ["probes.jsonl: 1 damaged line(s) skipped: line 2 (the last one cut off: "
                                      "the run was killed while writing it)"]
    (folder / "probes.jsonl").unlink()
    with pytest.raises(TwinError, match="no probes.jsonl"):
        replay(folder)


def test_replay_compares_detectors_on_the_same_evidence(tmp_path):
    from click.testing import CliRunner

    from twin.cli import cli

    folder = recorded(tmp_path)
    result = CliRunner().invoke(cli, ["detect", "replay", str(folder), "--detector", "probe-localizer",
                                       "--detector", "probe-likelihood"], terminal_width=200)
    assert result.exit_code == 0, result.output
    rows = [line for line in result.output.splitlines() if "probe-l" in line and "1 of 1" in line]
    assert len(rows) == 2, result.output  # one table row per detector, each found the one fault


@pytest.mark.parametrize("detector", ["probe-localizer", "probe-likelihood"])
def test_two_faults_at_once_are_each_named_and_no_link_beside_them(tmp_path, detector):
    """A 2 % drop on a leaf-spine link and a 5 % one-way drop on a spine-superspine link of another
    plane, under an all-ranks allreduce on rail4: links sharing a spine with either fault lose
    nothing, and the held-out drill of issue 33 saw the default detector name two of them."""
    result = replay(recorded(tmp_path, name="replay-two"), detector)
    assert (result.faults, result.replayed.right, result.replayed.wrong) == (2, 2, 0)
    assert set(result.replayed.detect_s) == {"leaf-spine", "one-way"}


def test_transport_state_replays_a_jobs_own_connection_states(tmp_path):
    """The gloo job crosses one of the two faulty host links: the replay names it, as live, and
    not the other; without the rows of the connections that lost, it names nothing."""
    result = replay(recorded(tmp_path, name="replay-transport"), "transport-state")
    assert result.intervals > 300 and result.live is not None
    assert (result.replayed.right, result.replayed.wrong) == (1, 0)
    assert set(result.replayed.detect_s) == {"crossed-link"} == set(result.live.detect_s)
    assert result.replayed.detect_s["crossed-link"] < 1.0
    clean = recorded(tmp_path / "clean", keep_sample=lambda qp: qp["naks"] == 0 and qp["waiting_ms"] < 100,
                     name="replay-transport")
    assert replay(clean, "transport-state").replayed.verdicts == 0


def test_transport_state_replay_needs_its_rows(tmp_path):
    with pytest.raises(TwinError, match="no transport.jsonl"):
        replay(recorded(tmp_path), "transport-state")  # a probes-only run
    folder = recorded(tmp_path / "t", name="replay-transport")
    (folder / "transport.jsonl").write_text('{"t": 1.0, "nic": "host-g1-h2:nic1", "qps": [{"sport": 1}]}\n')
    with pytest.raises(TwinError, match="a row is not a QP state"):
        replay(folder, "transport-state")


def test_transport_state_takes_no_path_discovery_that_no_switch_answered(tmp_path):
    """A RoCE job's recorded QP states (CI, 2026-12-02; scenario.yaml beside them): a 2 % drop on a
    rank's host link, named in 0.4 s; during it one QP's discovery came back with no answer at all,
    not even its own leaf's (its NIC did not hear them), and live the detector took that as five TTL
    probes lost on the QP's own healthy host link and named it too. Replayed, it is named alone."""
    result = replay(recorded(tmp_path, name="replay-unheard"), "transport-state")
    assert result.live is not None and (result.live.right, result.live.wrong) == (1, 1)  # the case is in it
    assert (result.replayed.right, result.replayed.wrong) == (1, 0)
    assert set(result.replayed.detect_s) == {"crossed"}


def test_transport_state_names_a_leaf_spine_drop_that_one_qp_crosses_as_that_qps_links(tmp_path):
    """replay-transport-set: a RoCE ring on mini, a 2 % drop on leaf-g1-r1 -- spine-1 that only the
    ring's QP from host-g1-h2 to host-g2-h1 crosses. Live (recorded before the change) transport-state
    named nothing: the QP's host links stayed rivals of the leaf-spine link while it waited for a
    loss that would tell them apart, which the QP's own packets never give. Replayed, it names the
    QP's four links at once, a set its QPs leave ambiguous one way (counted again from the rows):
    graded right, localized to 4 candidates."""
    result = replay(recorded(tmp_path, name="replay-transport-set"), "transport-state")
    assert result.live is not None and result.live.verdicts == 0
    assert (result.replayed.right, result.replayed.wrong, result.replayed.recall) == (1, 0, 1.0)
    assert result.replayed.candidates == {"fault": 4}
    assert result.replayed.detect_s["fault"] <= 1.0
    # Without the lossy QP's NAKs the evidence is gone, and so is the verdict.
    clean = replay(recorded(tmp_path / "clean", keep_sample=lambda qp: qp["naks"] == 0 and qp["timeouts"] == 0,
                            name="replay-transport-set"), "transport-state")
    assert clean.replayed.verdicts == 0
