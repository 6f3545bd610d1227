/* The layout every queue program and its controller share: one header, read by the C programs
 * (queues.bpf.c) and checked against the Python side (layout.py) by tests/unit/test_bpf_layout.py,
 * which reads the compiled object's BTF. Change a field here, then layout.py, then run that test. */
#ifndef FTW_QUEUES_H
#define FTW_QUEUES_H

/* The __u32 and __u64 types come from vmlinux.h, included first. */

/* One switch egress queue: an element of the mmap-able `queues` array. The programs move occ,
 * phase, peak, lost and marked; the controller writes the thresholds and reads everything. */
struct queue {
	__s64 occ;     /* bytes that entered the port's egress and have not reached the far end */
	__u64 phase;   /* odd while above XOFF; every change is +1, by compare-and-exchange */
	__u32 xoff;    /* pause the queue's senders above this many bytes (0: never: lossy) */
	__u32 xon;     /* resume them below this */
	__u32 peak;    /* the most bytes the queue held */
	__u32 lost;    /* events the ring buffer had no room for */
	__u32 kmin;    /* ECN: no ECN-capable packet is marked at or below this (0: marking off) */
	__u32 kmax;    /* ... every one is marked above this */
	__u32 pmax;    /* the marking probability just below kmax, in 1/65536 */
	__u32 buffer;  /* the port's buffer as modelled (lossless: XOFF plus headroom; 0: not counted).
			* The qdisc holds more (model/buffers.py, late allowance): what it holds above
			* this waited for a pause the controller sent later than the headroom allows */
	__u64 marked;  /* packets this queue marked Congestion Experienced */
	__s64 discount;  /* bytes the controller found counted but gone (a link that went down, an
			  * overflow): the queue is occ - discount. The controller's field alone, so its
			  * corrections never race the programs' atomic adds to occ. */
	__u64 steered_in;   /* adaptive routing: packets the kernel sent to another port, moved here */
	__u64 steered_away; /* ... packets the kernel sent here, moved to another port */
	__u64 late;    /* packets that entered the queue above its buffer: held for a late pause */
};

/* A port as the programs find it: the packet's network namespace and interface. */
struct port_key {
	__u64 netns;   /* bpf_get_netns_cookie() of the namespace the port is in */
	__u32 ifindex;
	__u32 spare;
};

enum { EVENT_XOFF = 1, EVENT_XON = 2 };

/* Adaptive routing (routing.load_balance; balance.h). */
enum { BALANCE_ECMP = 0, BALANCE_FLOWLET = 1, BALANCE_PACKET = 2 };
#define MAX_MEMBERS 64
/* What a sending NIC writes in the DSCP field of a packet the receiver can take out of order
 * (`multipath: true`); every other packet keeps the kernel's ECMP path. */
#define REORDERABLE_DSCP 10

/* The lab's setting: one element, the controller's. */
struct balance {
	__u32 mode;           /* BALANCE_* */
	__u32 choices;        /* members drawn at random and weighed against the kernel's choice */
	__u64 flowlet_gap_ns; /* flowlet: a flow idle this long may take another member */
	__u32 hash_offset;    /* 1: every other forwarded TCP/UDP packet takes its group's member
			       * (hash + offset) mod size, the offset its source port's low byte */
	__u32 spare;
};

/* routing.hash_offset: the source port's low OFFSET_BITS are the offset; the hash takes the rest */
#define OFFSET_BITS 8

/* An ECMP group of a switch (model/balance.py: the neighbours on the shortest paths to some
 * destination), the value of every member port's key (struct port_key) in `groups`. */
struct ecmp_group {
	__u32 count;
	__u32 seed;    /* its switch's tier's: the hash of routing.hash_offset (model/pathhash.py) */
	__u32 ifindex[MAX_MEMBERS];
	__u32 queue[MAX_MEMBERS];  /* each one's index in `queues` */
};

/* A flow at one switch (flowlet mode): the flowlet table's key and value. */
struct flow_key {
	__u64 netns;
	__u32 saddr, daddr;
	__u16 sport, dport;
	__u32 protocol;
};

struct flowlet {
	__u64 last_ns;   /* the flow's last packet at this switch */
	__u32 ifindex;   /* the member its flowlet took */
	__u32 spare;
};

/* What the ring buffer carries to the controller. */
struct event {
	__u32 queue;
	__u32 ingress; /* XOFF: the ifindex the packet came in on (who to pause); XON: 0 */
	__u32 kind;
	__u32 spare;
	__u64 phase;   /* XOFF: the phase it belongs to; XON: the phase it ended */
	__u64 time_ns; /* bpf_ktime_get_ns(): the controller measures its reaction from it */
};

/* No map holds an event, so its BTF is not in the object: its size is pinned here, and in layout.py. */
_Static_assert(sizeof(struct event) == 32, "struct event is 32 bytes (layout.EVENT)");

#endif
