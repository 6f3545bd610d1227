"""Routing transitions against the probe mesh's rediscovered paths: which probe intervals are
charged to paths that were no longer current (probes/transitions.py)."""

from twin.probes.transitions import MAX_S, Transitions


def test_an_interval_is_rerouting_from_the_change_until_every_agent_rediscovered():
    seen = Transitions()
    seen.discovered("h1", 1.0)
    seen.discovered("h2", 1.1)
    assert not seen.rerouting(9.0, 9.25)
    seen.changed(10.0)
    seen.changed(10.3)  # the same transition: no rediscovery asked for in between
    seen.refreshed(10.8)
    seen.discovered("h1", 11.0)
    assert seen.rerouting(9.9, 10.15)  # overlaps the first change
    assert seen.rerouting(11.0, 11.25)  # h2 has not rediscovered yet
    seen.discovered("h2", 11.4)
    assert seen.rerouting(11.25, 11.5)
    assert not seen.rerouting(11.5, 11.75)  # every agent's paths are current again
    assert not seen.rerouting(9.5, 9.75)  # before the change


def test_a_rediscovery_that_finished_before_the_refresh_does_not_settle_it():
    seen = Transitions()
    seen.changed(5.0)
    seen.discovered("h1", 5.2)  # a periodic round that began before the change
    seen.refreshed(5.6)
    assert seen.rerouting(5.5, 5.75)
    seen.discovered("h1", 6.0)
    assert not seen.rerouting(6.0, 6.25)


def test_a_change_after_the_refresh_starts_a_new_transition():
    seen = Transitions()
    seen.discovered("h1", 0.5)
    seen.changed(2.0)
    seen.refreshed(2.6)
    seen.discovered("h1", 2.9)
    seen.changed(4.0)  # a session coming back later
    assert not seen.rerouting(3.0, 3.25)
    assert seen.rerouting(4.0, 4.25)
    seen.refreshed(4.6)
    seen.discovered("h1", 5.0)
    assert not seen.rerouting(5.0, 5.25)


def test_an_agent_that_never_rediscovers_blanks_at_most_max_s():
    seen = Transitions()
    seen.discovered("h1", 0.5)
    seen.discovered("stuck", 0.5)
    seen.changed(1.0)
    seen.refreshed(1.5)
    seen.discovered("h1", 1.8)
    assert seen.rerouting(1.0 + MAX_S - 0.2, 1.0 + MAX_S)
    assert not seen.rerouting(1.0 + MAX_S, 1.0 + MAX_S + 0.25)


def test_routes_changed_after_a_time():
    transitions = Transitions()
    assert not transitions.changed_after(0.0)
    transitions.changed(5.0)
    transitions.changed(6.0)
    assert transitions.changed_after(5.5) and not transitions.changed_after(6.0)


def test_a_cover_mesh_is_rerouting_until_it_has_selected_from_the_rediscovered_paths():
    """Until then it probes the old selection: a link crossed only by flows that died is not
    probed yet, and looked gone (a dead leaf took the superspine with it)."""
    seen = Transitions()
    seen.selected(0.5)
    seen.discovered("h1", 0.4)
    seen.changed(2.0)
    seen.refreshed(2.6)
    seen.discovered("h1", 2.9)
    assert seen.rerouting(3.0, 3.25)  # rediscovered, not selected again yet
    seen.selected(3.9)
    assert seen.rerouting(3.75, 4.0)
    assert not seen.rerouting(4.0, 4.25)
