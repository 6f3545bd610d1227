// SPDX-License-Identifier: GPL-2.0
/* The receive side of every fabric port of a lab, switch or host (lab/ports/phy.py): what a cable, an
 * optic or a port's MAC does to a frame before the node sees it. Attached to every port at lab up,
 * healthy or not, the same program with the same maps: a fault on a link changes only its port's
 * element of `phy_faults`, so nothing a node lists (nft tables, qdiscs, filters, programs) tells a
 * faulty port from a healthy one. What it shows is what hardware shows: the receiving port's CRC
 * error count for damaged frames (`phy_counts`), and for a silent drop nothing at all. A switch's
 * black hole (a prefix its forwarding chip discards) is here too, in `phy_blackholes`: on a
 * forwarding chip it is a table entry nobody lists, not a rule.
 *
 * `receive` runs on the ingress after the queue program that counts a frame off the far switch
 * port's queue (that frame did leave the queue and cross the wire); `transmit` on the egress before
 * the queue program. Both also carry a miswire's swapped cables (`phy_partners`).
 */
#include "vmlinux.h"
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "phy.h"
#include "queues.h"
#include "wire.h"

#define TC_ACT_UNSPEC (-1)
#define TC_ACT_OK 0
#define TC_ACT_SHOT 2
#define BPF_F_INGRESS 1
#define ETH_P_IP 0x0800
#define ETH_HLEN 14
#define IP_MF 0x2000
#define IP_OFFSET 0x1FFF

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);  /* sized to the lab's ports at load */
	__type(key, struct port_key);
	__type(value, __u32);  /* the port's index in phy_faults and phy_counts */
} phy_ports SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct phy_fault);
} phy_faults SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct phy_counts);
} phy_counts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 4096);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct blackhole_key);
	__type(value, __u64);  /* packets discarded */
} phy_blackholes SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct phy_settings);
} phy_settings SEC(".maps");

/* Two ports whose cables are swapped (faults/miswire.py): each port's key -> the ifindex of the
 * port whose cable it now has. What one sends leaves by the other's wire (`transmit`), what
 * arrives on one's wire reaches the other (`receive`); each keeps its name, address, MAC and
 * sockets, as a physical port does when its cable is moved. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, struct port_key);
	__type(value, __u32);
} phy_partners SEC(".maps");

extern void *bpf_cast_to_kern_ctx(void *ctx) __ksym;

static __always_inline void port_of(struct __sk_buff *skb, struct port_key *key)
{
	struct sk_buff *kernel_skb = bpf_cast_to_kern_ctx(skb);

	key->netns = BPF_CORE_READ(kernel_skb, dev, nd_net.net, net_cookie);
	key->ifindex = skb->ifindex;
	key->spare = 0;
}

static __always_inline bool chance(__u32 ppm)
{
	return ppm && bpf_get_prandom_u32() % PHY_ONE < ppm;
}

/* A flow's place in [0, PHY_ONE): lowbias32 (Wellons) over the 5-tuple and the seed. */
static __always_inline __u32 flow_share(__u32 saddr, __u32 daddr, __u32 ports, __u8 protocol, __u32 seed)
{
	__u32 h = seed ^ saddr;

	h = (h ^ (h >> 16)) * 0x7feb352d;
	h ^= daddr;
	h = (h ^ (h >> 15)) * 0x846ca68b;
	h ^= ports ^ ((__u32)protocol << 24);
	h = (h ^ (h >> 16)) * 0x7feb352d;
	h = (h ^ (h >> 15)) * 0x846ca68b;
	h ^= h >> 16;
	return h % PHY_ONE;
}

/* What arrived on this port's wire: received here, or, if the port's cable was swapped, by the
 * partner (marked: its `receive` takes it without a second look). */
static __always_inline int cross(struct __sk_buff *skb, struct port_key *key)
{
	__u32 *partner = bpf_map_lookup_elem(&phy_partners, key);

	if (!partner)
		return TC_ACT_UNSPEC;
	skb->mark = WIRE_CROSSED_MARK;
	return bpf_redirect(*partner, BPF_F_INGRESS);
}

/* The egress of every port, before anything else there: a frame the node sent by a port whose
 * cable was swapped leaves by the partner's wire (marked, so the partner's egress passes it on to
 * its own qdisc: its shaping and PFC gate, the wire it now leaves by). */
SEC("tc")
int transmit(struct __sk_buff *skb)
{
	struct phy_settings *settings;
	struct port_key key;
	__u32 *partner, zero = 0;

	if (skb->mark == WIRE_CROSSED_MARK) {
		skb->mark = 0;
		return TC_ACT_UNSPEC;  /* moved here from the partner: on to this port's qdisc */
	}
	settings = bpf_map_lookup_elem(&phy_settings, &zero);
	if (!settings || !settings->crossed_ports)
		return TC_ACT_UNSPEC;  /* no cable swapped anywhere in the lab: the common case */
	port_of(skb, &key);
	partner = bpf_map_lookup_elem(&phy_partners, &key);
	if (!partner)
		return TC_ACT_UNSPEC;
	skb->mark = WIRE_CROSSED_MARK;
	return bpf_redirect(*partner, 0);
}

SEC("tc")
int receive(struct __sk_buff *skb)
{
	struct port_key key;
	struct phy_fault *fault;
	struct phy_counts *counts;
	struct phy_settings *settings;
	struct iphdr ip;
	__u32 *index, ports = 0, zero = 0;
	bool transport;

	/* A wire carries no hash. The kernel's flow hash on a packet (computed for receive packet
	 * steering, netconf.in_order_delivery, or set from the sending host's socket) would be taken
	 * by the switch's ECMP as it stands (fib_multipath_hash uses an L4 hash already on the
	 * packet) instead of the switch's own seeded hash of the headers: every tier would then pick
	 * the same next hop (8 of rail4's superspine links went unused). */
	bpf_set_hash_invalid(skb);
	if (skb->mark == WIRE_CROSSED_MARK) {
		skb->mark = 0;
		return TC_ACT_OK;  /* moved here from the partner's wire: received by this port */
	}
	if (skb->protocol == bpf_htons(ETH_P_LLDP))
		return TC_ACT_STOLEN;  /* trapped by lldpd already; passed on, counted as a receive drop */
	settings = bpf_map_lookup_elem(&phy_settings, &zero);
	if (!settings || !(settings->blackholes | settings->faulty_ports | settings->crossed_ports))
		return TC_ACT_UNSPEC;  /* nothing wrong anywhere in the lab: the common case, one lookup */
	port_of(skb, &key);
	if (skb->protocol != bpf_htons(ETH_P_IP))
		return cross(skb, &key);
	index = bpf_map_lookup_elem(&phy_ports, &key);
	if (!index)
		return cross(skb, &key);
	if (settings->blackholes && bpf_skb_load_bytes(skb, ETH_HLEN, &ip, sizeof(ip)) == 0 && ip.ttl > 1) {
		/* (a packet that expires here is the switch CPU's, which answers it: traceroute still
		 * sees the switch, as with a black hole in a real forwarding chip) */
		struct blackhole_key hole = {.prefixlen = 64 + 32, .netns = key.netns, .daddr = ip.daddr};
		__u64 *taken = bpf_map_lookup_elem(&phy_blackholes, &hole);

		if (taken) {
			__sync_fetch_and_add(taken, 1);
			return TC_ACT_SHOT;
		}
	}
	fault = bpf_map_lookup_elem(&phy_faults, index);
	counts = bpf_map_lookup_elem(&phy_counts, index);
	if (!fault || !counts || !(fault->drop | fault->corrupt))
		return cross(skb, &key);  /* a healthy port of a lab with something wrong elsewhere */
	if (bpf_skb_load_bytes(skb, ETH_HLEN, &ip, sizeof(ip)) < 0)
		return cross(skb, &key);
	transport = (ip.protocol == IPPROTO_TCP || ip.protocol == IPPROTO_UDP) &&
		    !(ip.frag_off & bpf_htons(IP_MF | IP_OFFSET));
	if (transport)
		bpf_skb_load_bytes(skb, ETH_HLEN + ip.ihl * 4, &ports, sizeof(ports));
	if (fault->drop && (fault->drop_flows >= PHY_ONE ||
			    flow_share(ip.saddr, ip.daddr, ports, ip.protocol, fault->flow_seed) < fault->drop_flows) &&
	    chance(fault->drop)) {
		__sync_fetch_and_add(&counts->dropped, 1);
		return TC_ACT_SHOT;
	}
	if (fault->corrupt && transport && bpf_ntohs(ip.tot_len) >= fault->corrupt_min && chance(fault->corrupt)) {
		__sync_fetch_and_add(&counts->crc_errors, 1);
		return TC_ACT_SHOT;  /* the frame check fails: the MAC discards it and counts it */
	}
	return cross(skb, &key);
}

char LICENSE[] SEC("license") = "GPL";
