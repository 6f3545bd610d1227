"""Linux socket options Python's socket module does not name, in one place."""

SO_RCVBUFFORCE = 33  # asm-generic/socket.h: root may set a receive buffer past net.core.rmem_max
