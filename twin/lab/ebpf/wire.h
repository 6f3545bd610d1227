/* What the cable-swap programs (wire.bpf.c) and the queue programs (queues.bpf.c) agree on. */
#ifndef FTW_WIRE_H
#define FTW_WIRE_H

/* The mark a frame carries between the two halves of a crossed pair of ports: set by the port that
 * moved it, cleared by the port it moved to. A frame arriving from another namespace never carries
 * it (the veth scrubs the mark on the way in), so it tells a moved frame from one off the wire. */
#define WIRE_CROSSED_MARK 0x77697265  /* "wire" */

#endif
