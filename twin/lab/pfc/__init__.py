"""Lossless fabric: PFC-like backpressure on every switch port and host NIC.

The kernel has no PFC, so it is emulated on the real packets: eBPF programs count every switch
port's egress queue per packet (programs.py); a controller process per lab (controller.py) waits
on their threshold events and pauses exactly the upstream ports that feed a queue above XOFF,
through a TBF gate under each port's data class (gate.py), until the queue falls below XON.
Pauses spread hop by hop because a paused port's own queue fills in turn. Faults (pfc_pause,
pfc_storm) and the PFC watchdog act through the same controller (client.py), and every pause is
counted per port (counters.py). thresholds.py sizes XOFF, XON and the buffers from the line rate.
"""
