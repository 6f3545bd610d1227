"""BFD's packets and timers for every switch of a lab in one process (the data plane FRR's bfdd
hands its sessions to: dataplane.py), the protocol's pure parts (wire.py, session.py), and
starting it (client.py)."""
