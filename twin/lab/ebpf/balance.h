/* Adaptive routing at a switch's egress (routing.load_balance: flowlet | packet), part of the
 * enqueue program (queues.bpf.c), as switch ASICs balance an ECMP group by queue depth (Broadcom
 * DLB, Spectrum-X adaptive routing).
 *
 * The kernel routed the packet first: its FIB (what FRR installed), its ECMP hash, the ingress
 * faults and the TTL all acted. Leaving through a member of one of the switch's ECMP groups (a
 * leaf's spines, a spine's superspines, a superspine's spines of one plane: `groups`, written
 * from model/balance.py), a packet its NIC marked reorderable (DSCP REORDERABLE_DSCP) may be
 * moved to another member whose queue holds less:
 *   packet   every packet weighs the kernel's member against `choices` members drawn at random
 *            (the power of random choices: two draws balance nearly as well as weighing all);
 *   flowlet  the same choice, made only when the flow was idle for `flowlet_gap_ns` at this
 *            switch: a gap longer than any queue's delay lets no packet overtake the one before.
 * A member is taken only if the kernel's FIB routes the packet's destination through it now
 * (bpf_fib_lookup with that port as the output interface: no route through it, a link down or
 * a neighbour unresolved all refuse it), and the packet leaves with that next hop's addresses.
 * So a dead link leaves the choice with its first packet, in the data plane, and a route that
 * lost a member (a failure further on) leaves it when routing withdraws it.
 * Deterministic path control (routing.hash_offset, as Alibaba's RePaC and Tencent's hash
 * dodging): every other forwarded TCP/UDP packet takes the member (hash + offset) mod the group's
 * size, the hash the switch's own over the 5-tuple less the offset, the offset the low byte of
 * its source port. A host that adds 1 to that byte moves its flow to the next member at every
 * hop: a path that shares no spine or superspine with the old one. Members the FIB refuses are
 * passed over in order.
 * Everything else (single next hops, other protocols, the switch's own packets) keeps the
 * kernel's path.
 *
 * The moved packet meets the enqueue program again on its new port's egress, marked
 * STEERED_MARK so that it is counted there and not weighed twice. */
#ifndef FTW_BALANCE_H
#define FTW_BALANCE_H

#define AF_INET 2
#define STEERED_MARK 0x40000000
#define IP_FRAGMENT_BITS 0x3fff /* more-fragments and offset: a fragment has no ports */
#define KEEP -1                 /* not moved: the enqueue program goes on with this port */

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct balance);
} balance SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1); /* set to the lab's count of group members before loading */
	__type(key, struct port_key);  /* a member port */
	__type(value, struct ecmp_group);  /* its group */
} groups SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1 << 16);
	__type(key, struct flow_key);
	__type(value, struct flowlet);
} flowlets SEC(".maps");

/* The queue's bytes now: what its programs counted, less the controller's corrections. */
static __always_inline __s64 held(struct queue *q)
{
	return q->occ - q->discount;
}

/* Whether the FIB routes this packet out of `ifindex` now; fills the next hop's MAC addresses. */
static __always_inline bool routed_through(struct __sk_buff *skb, struct iphdr *ip, __u32 ifindex,
					   struct bpf_fib_lookup *fib)
{
	__builtin_memset(fib, 0, sizeof(*fib));
	fib->family = AF_INET;
	fib->l4_protocol = ip->protocol;
	fib->tot_len = 0;  /* no MTU check: a GSO aggregate is longer than the MTU until it is cut */
	fib->ipv4_src = ip->saddr;
	fib->ipv4_dst = ip->daddr;
	fib->ifindex = ifindex;
	return bpf_fib_lookup(skb, fib, sizeof(*fib), BPF_FIB_LOOKUP_OUTPUT) == BPF_FIB_LKUP_RET_SUCCESS &&
	       fib->ifindex == ifindex;
}

/* The member whose queue holds least: the kernel's (`current`) against `choices` random draws.
 * Returns the slot in `up`, or -1 for the kernel's own. */
static __always_inline int least_held(struct ecmp_group *up, __u32 current, __s64 current_held, __u32 choices)
{
	__s64 best_held = current_held;
	int best = -1;

	for (__u32 draw = 0; draw < 4 && draw < choices; draw++) {
		__u32 slot = bpf_get_prandom_u32() % up->count;
		struct queue *q;
		__u32 id;

		if (slot >= MAX_MEMBERS)
			break;
		if (up->ifindex[slot] == current)
			continue;
		id = up->queue[slot];
		q = bpf_map_lookup_elem(&queues, &id);
		if (q && held(q) < best_held) {
			best_held = held(q);
			best = slot;
		}
	}
	return best;
}

/* Leave through `ifindex` instead: the next hop's addresses, the mark, and (`adaptive`: moved
 * for its queue) the counters of packets moved off the kernel's choice. */
static __always_inline int move(struct __sk_buff *skb, struct queue *from, struct bpf_fib_lookup *fib,
				__u32 ifindex, __u32 to_id, bool adaptive)
{
	struct queue *to = bpf_map_lookup_elem(&queues, &to_id);

	if (bpf_skb_store_bytes(skb, 0, fib->dmac, ETH_ALEN, 0) ||
	    bpf_skb_store_bytes(skb, ETH_ALEN, fib->smac, ETH_ALEN, 0))
		return KEEP;
	skb->mark |= STEERED_MARK;
	if (adaptive) {
		__sync_fetch_and_add(&from->steered_away, 1);
		if (to)
			__sync_fetch_and_add(&to->steered_in, 1);
	}
	return bpf_redirect(ifindex, 0);
}

static __always_inline int member_slot(struct ecmp_group *up, __u32 ifindex)
{
	for (__u32 slot = 0; slot < MAX_MEMBERS; slot++) {
		if (slot >= up->count)
			return -1;
		if (up->ifindex[slot] == ifindex)
			return slot;
	}
	return -1;
}

/* The hash of routing.hash_offset (model/pathhash.py computes the same): lowbias32's mixer over
 * the switch's seed and the 5-tuple less the offset bits, in host byte order. Linear in nothing:
 * the offset is added after it, so a host moves its flow by a known number of members. */
static __always_inline __u32 mix(__u32 x)
{
	x ^= x >> 16;
	x *= 0x7feb352d;
	x ^= x >> 15;
	x *= 0x846ca68b;
	x ^= x >> 16;
	return x;
}

static __always_inline __u32 flow_hash(__u32 seed, struct iphdr *ip, __u16 sport, __u16 dport)
{
	__u32 h = mix(seed ^ bpf_ntohl(ip->saddr));

	h = mix(h ^ bpf_ntohl(ip->daddr));
	h = mix(h ^ ((__u32)ip->protocol << 16 | (sport >> OFFSET_BITS)));
	return mix(h ^ dport);
}

/* routing.hash_offset: the member (hash + offset) mod size, or the next one the FIB routes the
 * packet through (a member down, or no route through it: the same order on every packet). */
static __always_inline int offset_path(struct __sk_buff *skb, struct queue *q, struct ecmp_group *up,
				       struct iphdr *ip, __u16 sport, __u16 dport)
{
	__u32 first = flow_hash(up->seed, ip, sport, dport) + (sport & ((1 << OFFSET_BITS) - 1));
	struct bpf_fib_lookup fib;

	for (__u32 tried = 0; tried < MAX_MEMBERS && tried < up->count; tried++) {
		__u32 slot = (first + tried) % up->count;

		if (slot >= MAX_MEMBERS)
			return KEEP;
		if (up->ifindex[slot] == skb->ifindex)
			return KEEP;  /* the kernel's choice is the member's */
		if (routed_through(skb, ip, up->ifindex[slot], &fib))
			return move(skb, q, &fib, up->ifindex[slot], up->queue[slot], false);
	}
	return KEEP;
}

/* KEEP, or the verdict that moves the packet to another member of its ECMP group. */
static __always_inline int steer(struct __sk_buff *skb, struct queue *q, struct port_key *port)
{
	__u32 zero = 0, current = skb->ifindex;
	struct balance *setting = bpf_map_lookup_elem(&balance, &zero);
	struct bpf_fib_lookup fib;
	struct flowlet *flowlet = NULL;
	struct flow_key key = {};
	struct ecmp_group *up;
	struct iphdr ip;
	__u16 sport = 0, dport = 0;
	bool reorderable;
	__u64 now = 0;
	int slot;

	if (skb->mark & STEERED_MARK) {  /* moved here by this program: count it here */
		skb->mark &= ~STEERED_MARK;
		return KEEP;
	}
	if (!setting || (setting->mode == BALANCE_ECMP && !setting->hash_offset) || !skb->ingress_ifindex)
		return KEEP;
	if (skb->protocol != bpf_htons(ETH_P_IP) || bpf_skb_load_bytes(skb, ETH_HLEN, &ip, sizeof(ip)))
		return KEEP;
	up = bpf_map_lookup_elem(&groups, port);
	if (!up || up->count < 2)
		return KEEP;  /* a port in no ECMP group: the only way to where the packet goes */
	if (!(ip.frag_off & bpf_htons(IP_FRAGMENT_BITS)) &&
	    (ip.protocol == IPPROTO_UDP || ip.protocol == IPPROTO_TCP)) {
		__be16 ports[2];

		if (!bpf_skb_load_bytes(skb, ETH_HLEN + ip.ihl * 4, ports, sizeof(ports))) {
			sport = bpf_ntohs(ports[0]);
			dport = bpf_ntohs(ports[1]);
		}
	}
	reorderable = (ip.tos >> 2) == REORDERABLE_DSCP;
	if (!reorderable || setting->mode == BALANCE_ECMP) {
		if (setting->hash_offset && (ip.protocol == IPPROTO_UDP || ip.protocol == IPPROTO_TCP))
			return offset_path(skb, q, up, &ip, sport, dport);
		return KEEP;
	}
	if (setting->mode == BALANCE_FLOWLET) {
		key.netns = port->netns;
		key.saddr = ip.saddr;
		key.daddr = ip.daddr;
		key.protocol = ip.protocol;
		key.sport = sport;
		key.dport = dport;
		now = bpf_ktime_get_ns();
		flowlet = bpf_map_lookup_elem(&flowlets, &key);
		if (flowlet && now - flowlet->last_ns < setting->flowlet_gap_ns) {
			flowlet->last_ns = now;
			if (flowlet->ifindex == current)
				return KEEP;
			slot = member_slot(up, flowlet->ifindex);
			if (slot >= 0 && slot < MAX_MEMBERS && routed_through(skb, &ip, flowlet->ifindex, &fib))
				return move(skb, q, &fib, flowlet->ifindex, up->queue[slot], true);
			/* its member is gone: a new flowlet, chosen now */
		}
	}
	slot = least_held(up, current, held(q), setting->choices);
	if (slot >= 0 && slot < MAX_MEMBERS && !routed_through(skb, &ip, up->ifindex[slot], &fib))
		slot = -1;  /* the FIB does not route it there (now): the kernel's choice stands */
	if (setting->mode == BALANCE_FLOWLET) {
		struct flowlet chosen = { .last_ns = now, .ifindex = slot >= 0 && slot < MAX_MEMBERS ?
								      up->ifindex[slot] : current };

		bpf_map_update_elem(&flowlets, &key, &chosen, BPF_ANY);
	}
	if (slot < 0 || slot >= MAX_MEMBERS)
		return KEEP;
	return move(skb, q, &fib, up->ifindex[slot], up->queue[slot], true);
}

#endif
