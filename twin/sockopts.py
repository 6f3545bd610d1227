"""Linux socket options Python's socket module does not name, in one place."""

SO_RCVBUFFORCE = 33  # asm-generic/socket.h: root may set a receive buffer past net.core.rmem_max
# asm-generic/socket.h: each datagram comes with the time the kernel received it (struct timespec,
# CLOCK_REALTIME) as an SCM_TIMESTAMPNS message of the same number
SO_TIMESTAMPNS = 35
