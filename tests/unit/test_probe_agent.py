"""The probe agent's bookkeeping (no sockets): a bucket's receipts are written, and the bucket
marked final, only once its grace has passed before the agent last read its sockets."""

import json

from twin.probes.agent import Agent


def agent(tmp_path) -> Agent:
    config = {"epoch": 100.0, "interval_ms": 10, "report_ms": 250, "grace_s": 0.5, "nics": ["a:nic1", "b:nic1"],
              "output": str(tmp_path / "agent.jsonl"), "pairs": []}
    return Agent(config)


def lines(tmp_path) -> list[dict]:
    return [json.loads(line) for line in (tmp_path / "agent.jsonl").read_text().splitlines()]


def test_a_bucket_is_final_only_once_its_grace_passed_before_the_last_read(tmp_path):
    probe = agent(tmp_path)
    probe.received[0][(0, 1, 10000)].append(0.001)  # bucket 0: [100.0, 100.25); final after 100.75
    # Off the CPU from 100.70 to 102.0: the clock is past the grace, the sockets were last read before it.
    probe._flush(now=102.0, read_until=100.70)
    assert [r["type"] for r in lines(tmp_path)] == []
    probe._flush(now=102.1, read_until=102.05)
    written = lines(tmp_path)
    assert [r["type"] for r in written] == ["recv", "mark"]
    assert written[0]["b"] == 0 and written[1]["b"] == int((102.05 - 0.5 - 100.0) / 0.25) - 1


def test_sent_rows_follow_the_clock_and_the_end_writes_everything(tmp_path):
    probe = agent(tmp_path)
    probe.sent[0][(0, 1, 10000)] += 3
    probe.received[1][(0, 1, 10000)].append(0.001)
    probe._flush(now=100.31, read_until=100.30)
    assert [r["type"] for r in lines(tmp_path)] == ["sent"]
    probe._flush(float("inf"), float("inf"))
    assert [r["type"] for r in lines(tmp_path)] == ["sent", "recv", "mark"]
