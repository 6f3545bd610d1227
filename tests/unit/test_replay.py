"""`twin detect replay`: the probe localizers run again on a recorded run's probes.jsonl (a 5 %
silent drop on mini, tests/data/results/replay-drop, recorded with its scenario.yaml, both
localizers live). mini's two leaves make the case ambiguous: every probed path over the faulty
leaf-spine link crosses the other leaf's link to that spine, so probe-likelihood names the two
as a set, which the grading counts right because the run's probe plan recorded them as a class
it cannot tell apart."""

import gzip
import json
import shutil
from pathlib import Path

import pytest

from twin.errors import TwinError
from twin.results.replay import replay

DATA = Path(__file__).resolve().parents[1] / "data" / "results" / "replay-drop"


def recorded(into: Path, keep_sample=lambda sample: True) -> Path:
    folder = into / "replay-drop"
    folder.mkdir()
    for name in ("run.json", "model.json"):
        shutil.copy(DATA / name, folder / name)
    (folder / "events.jsonl").write_bytes(gzip.decompress((DATA / "events.jsonl.gz").read_bytes()))
    with open(folder / "probes.jsonl", "w") as out:
        for line in gzip.decompress((DATA / "probes.jsonl.gz").read_bytes()).decode().splitlines():
            interval = json.loads(line)
            interval["samples"] = [s for s in interval["samples"] if keep_sample(s)]
            out.write(json.dumps(interval) + "\n")
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
