"""The probe mesh: Pingmesh-style UDP probes between host NICs over every ECMP path, with
path discovery, so detectors can tell which link a lost probe crossed.

`plan` decides pairs and ports (pure), `agent` is the per-host prober process, `mesh`
starts the agents, maps what they learn onto the model's links and merges their counts.
"""
