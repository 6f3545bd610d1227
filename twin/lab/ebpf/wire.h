/* What the ports' physical layer (phy.bpf.c, which carries a miswire's swapped cables) and the queue
 * programs (queues.bpf.c) agree on. */
#ifndef FTW_WIRE_H
#define FTW_WIRE_H

/* The mark a frame carries between the two halves of a crossed pair of ports: set by the port that
 * moved it, cleared by the port it moved to. A frame arriving from another namespace never carries
 * it (the veth scrubs the mark on the way in), so it tells a moved frame from one off the wire. */
#define WIRE_CROSSED_MARK 0x77697265  /* "wire" */

/* LLDP frames end at a port's ingress programs (TC_ACT_STOLEN): lldpd has its copy already, and no
 * protocol handler takes them, so passed on the kernel would count each as a receive drop. */
#define ETH_P_LLDP 0x88cc
#define TC_ACT_STOLEN 4

#endif
