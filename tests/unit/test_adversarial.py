"""The adversarial new user (tests/unit/adversarial.py): every bad or borderline file, every misuse
of a command that needs no lab, every crash-damaged results folder, and a seeded set of mutated
shipped files gets a clear answer: refused with file and line (or key) and a hint, or accepted
where valid; never a traceback, never over 5 s or 500 MB, nothing created on the machine."""

from __future__ import annotations

import os

import pytest
from adversarial import LIMIT_MB, LIMIT_S, all_cases, counts, mutated_cases, run_all

# Forks a child per case: one worker runs the module (its cases share a scratch folder).
pytestmark = pytest.mark.xdist_group("adversarial")
FUZZ_COUNT = int(os.environ.get("FUZZ_EXAMPLES", "150"))


def _unclear(outcomes) -> list[str]:
    return [f"{o.case.name}: {o.verdict}: {o.why}\n    {o.output.strip()[-400:]}" for o in outcomes
            if o.verdict != "clear"]


def test_every_adversarial_case_gets_a_clear_answer(tmp_path):
    outcomes = run_all(all_cases(), tmp_path)
    found = counts(outcomes)
    slowest = max(outcomes, key=lambda o: o.seconds)
    print(f"\nadversarial: {len(outcomes)} cases {dict(found)}; slowest {slowest.case.name} {slowest.seconds:.2f} s, "
          f"largest {max(o.max_rss_mb for o in outcomes):.0f} MB (limits {LIMIT_S} s, {LIMIT_MB} MB)")
    assert not _unclear(outcomes), "\n".join(_unclear(outcomes))


def test_mutated_shipped_files_get_a_clear_answer(tmp_path):
    outcomes = run_all(mutated_cases(FUZZ_COUNT, seed=20261127), tmp_path)
    assert not _unclear(outcomes), "\n".join(_unclear(outcomes))
    assert {o.exit for o in outcomes} <= {0, 2}


def test_the_harness_can_fail(tmp_path):
    """A traceback, an accepted impossible file and a refused valid one are each caught."""
    from adversarial import Case
    cases = [Case("plant/traceback", ["check", "case.yaml"], {"case.yaml": "x"}),
             Case("plant/accepted", ["check", "--help"]),
             Case("plant/refused-valid", ["check", "nowhere.yaml"], valid=True)]
    import adversarial
    real = adversarial._child

    def crashing(case, *args):
        if case.name == "plant/traceback":
            import twin.run.check
            twin.run.check._check = None  # the check itself breaks: `check` turns it into an internal error
        real(case, *args)
    adversarial._child = crashing
    try:
        verdicts = {o.case.name: o.verdict for o in run_all(cases, tmp_path)}
    finally:
        adversarial._child = real
    assert verdicts == {"plant/traceback": "traceback", "plant/accepted": "wrong", "plant/refused-valid": "wrong"}
