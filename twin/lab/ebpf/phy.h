/* The layout the ports' physical layer (phy.bpf.c) and twin/lab/ports/phy.py share; checked against the
 * compiled object's BTF by tests/unit/test_bpf_layout.py. */
#ifndef FTW_PHY_H
#define FTW_PHY_H

/* Probabilities and shares in parts per million: 1,000,000 is every packet (every flow). */
#define PHY_ONE 1000000

/* What is wrong with a port's receive side (an element of `phy_faults`, indexed as `phy_ports`
 * says). All zero on a healthy port; a fault writes it and its clear writes back what was there. */
struct phy_fault {
	__u32 drop;          /* silent drop: share of IPv4 packets lost without a trace, ppm */
	__u32 drop_flows;    /* ... only flows whose 5-tuple hash falls below this share, ppm */
	__u32 flow_seed;     /* ... the hash's seed (the scenario's) */
	__u32 corrupt;       /* bit errors: share of TCP/UDP packets that arrive damaged, ppm */
	__u32 corrupt_min;   /* ... only IP packets of at least this many bytes */
	__u32 attenuation;   /* the optic's extra loss, 0.01 dB: read by its readings (lab/ports/optics.py),
			      * not by the program */
};

/* What the port counts (an element of `phy_counts`): the receive errors a real port's MAC counts,
 * and, for grading only, what a silent drop took (a real optic counts nothing for it). */
struct phy_counts {
	__u64 crc_errors;    /* frames that failed the frame check: damaged on the wire, discarded */
	__u64 dropped;       /* frames a silent drop took */
};

/* A black hole in a switch's forwarding chip (faults/blackhole.py): packets it would forward toward
 * the prefix are discarded. The key of `phy_blackholes`, a longest-prefix-match trie: prefixlen
 * counts the namespace cookie's 64 bits and then the prefix's. The value counts what it took. */
struct blackhole_key {
	__u32 prefixlen;
	__u64 netns;   /* the switch's namespace (bpf_get_netns_cookie) */
	__u32 daddr;   /* the prefix, network byte order */
} __attribute__((packed));

/* The lab's: what is wrong anywhere in it, counted by lab/ports/phy.py after every change. A packet on a
 * lab with nothing wrong reads this one element and nothing else; the trie is read only while a
 * black hole is set, the partners only while cables are swapped. */
struct phy_settings {
	__u32 blackholes;     /* prefixes in phy_blackholes */
	__u32 faulty_ports;   /* ports whose phy_faults element drops or damages */
	__u32 crossed_ports;  /* entries in phy_partners */
	__u32 spare;
};

#endif
