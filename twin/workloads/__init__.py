"""Workloads: traffic a run puts on the fabric (flows, probes, collectives); registry.py lists them."""
