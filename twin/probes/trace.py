"""What path discovery's answers mean (the socket side, TTL-limited sends and the error queue, is
in twin/sockopts.py, shared with the RoCE NIC): the probe mesh's paths and the QPs' (transport-state)."""

from __future__ import annotations


def agrees_where_answered(found: list | tuple, known: list | tuple) -> bool:
    """A path discovered with hops that did not answer (None) is `known` when every hop that did
    answer agrees with it: a fault that drops a flow drops its TTL probes past the faulty link
    too, so silence is not a contradiction (probe agent siblings, the mesh's path names)."""
    return len(found) == len(known) and all(new is None or new == old for new, old in zip(found, known))


def unless_silent(known: tuple | None, found: tuple, stale: bool = False, unroutable: bool = False) -> tuple:
    """A rediscovered path with hops that did not answer, whose answered hops all agree with the
    flow's previous (complete) path, is that path: a fault that drops this flow drops its TTL
    probes past the faulty link too, and its loss would otherwise be charged to the links
    before it. A flow that moved answers on its new path. Not when routes changed since that
    path was complete (`stale`): the flow may have moved where the fault silences it (a drop of
    some 5-tuples that flapped a BGP session moved flows back and forth, and their loss was
    charged to the links they had left). Unless a switch answered the flow's TTL probes that it
    has no route for it (`unroutable`): the routes were withdrawn with nowhere else to go (the
    only superspine died), a drop is silent, and nothing shows the flow moved. Its last complete
    path holds the switch whose loss emptied the routes; the unanswered one leaves only the two
    host links to blame."""
    if (known and None not in known and None in found and (not stale or unroutable)
            and agrees_where_answered(found, known)):
        return known
    return found
