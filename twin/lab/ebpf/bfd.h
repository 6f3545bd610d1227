/* The BFD fast path (bfd.bpf.c) and the lab's BFD data plane (lab/bfd/fastpath.py) agree on these;
 * tests/unit/test_bpf_layout.py checks the Python side against the compiled object's BTF. */
#ifndef FTW_BFD_H
#define FTW_BFD_H

#define BFD_CONTROL_LEN 24  /* a control packet without authentication */
#define BFD_FRAME_LEN 66    /* Ethernet 14 + IPv4 20 + UDP 8 + BFD 24 */
#define BFD_TICK_PORT 3785  /* the data plane's tick on a switch's loopback (3785 is BFD echo's: never sent here) */
#define BFD_MAX_PER_SWITCH 512

/* A session's receive side, found by (namespace, our discriminator): the peer's steady packet, and
 * when one like it was last heard. What arrives unlike it (a state change, a Poll) goes on to the
 * data plane's socket. The addresses of the last packet heard are kept for the transmit frame. */
struct bfd_key {
	__u64 netns;
	__u32 discr;
	__u32 spare;
};

struct bfd_rx {
	__u8 expect[BFD_CONTROL_LEN];
	__u8 peer_mac[6];
	__u8 local_mac[6];
	__u32 ifindex;   /* the port it was last heard on */
	__u32 armed;     /* 1: packets equal to `expect` end here */
	__u64 last_ns;   /* bpf_ktime_get_ns() of the last packet that ended here */
	__u64 packets;   /* that ended here */
	__u64 spare;
};

/* A session's transmit side: its steady packet as a whole frame, sent out of its port at every tick
 * of its switch while armed. */
struct bfd_tx {
	__u32 ifindex;
	__u32 armed;
	__u64 packets;
	__u8 frame[BFD_FRAME_LEN];
	__u8 spare[6];
};

struct bfd_switch {
	__u32 count;
	__u32 spare;
	__u32 slots[BFD_MAX_PER_SWITCH];  /* indexes into bfd_tx */
};

#endif
