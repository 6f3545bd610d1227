"""Counters of every node, sampled fast: interfaces, qdisc backlog, checksum errors, fault counters.

`counters` reads one snapshot over netlink, `sampler` samples on a period into a metrics
file of the run, `prometheus` serves the latest snapshot in Prometheus' text format.
"""
