// SPDX-License-Identifier: GPL-2.0
/* The switch queues of a lab, measured and marked on every packet in the kernel.
 *
 * A port's queue is the bytes that entered its egress (counted in by `enqueue`, on the port's
 * clsact egress hook, before the qdisc) and have not yet arrived at the far end of the link
 * (counted off by `dequeue`, on the peer interface's clsact ingress hook): the qdisc's backlog
 * plus the few packets on the wire, with no polling. One load of each program serves every port
 * of the lab: a packet finds its queue by (network namespace cookie, ifindex). The cookie is its
 * device's namespace's, read through the kernel's sk_buff (bpf_cast_to_kern_ctx, CO-RE):
 * bpf_get_netns_cookie() answers the initial namespace's for a packet without a socket, i.e.
 * for every packet a switch forwards.
 *
 * A lossless queue counts the packets that enter it above its modelled buffer (`late`): a real
 * switch's pause takes hold within its headroom; the emulated one waits for the controller.
 *
 * PFC: crossing the thresholds puts an event on a ring buffer the controller waits on:
 *   XOFF(queue, ingress ifindex, phase)  above XOFF, a packet from this ingress port arrived:
 *                                        pause that sender (once per ingress port and phase)
 *   XON(queue, phase)                    below XON: resume the queue's senders
 * The phase is odd while the queue is above XOFF; every change is a compare-and-exchange that
 * moves it up by one, so the controller can tell a stale XOFF from one of a new phase.
 *
 * ECN (RED-like, as switch ASICs mark for DCQCN and DCTCP): an ECN-capable IPv4 packet that
 * takes the queue above kmin is marked Congestion Experienced with a probability rising
 * linearly from 0 at kmin to pmax just below kmax, and always at or above kmax. On the
 * instantaneous queue, as most ASICs mark; the count of marks is the queue's `marked`.
 *
 * `dequeue` returns TC_ACT_UNSPEC: a program after it on the port's ingress still runs (the ports'
 * physical layer, phy.bpf.c, which also carries a miswire's swapped cables). It also runs on the ingress of ports that drain no queue but
 * have a clsact qdisc (a leaf's ports toward hosts), to end LLDP frames there (see arrived()).
 *
 * Adaptive routing (balance.h): before it is counted, a reorderable packet leaving by a member of
 * an ECMP group may move to the member whose queue holds least.
 */
#include "vmlinux.h"  /* the running kernel's types, from its BTF (make deps: bpftool) */
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "queues.h"
#include "wire.h"

#define TC_ACT_UNSPEC (-1)
#define TC_ACT_OK 0
#define ETH_HLEN 14
#define ETH_ALEN 6
#define ETH_P_IP 0x0800
#define ECN_MASK 3
#define ECN_CE 3
#define PROBABILITY_ONE 65536

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1); /* set to the lab's queue count before loading */
	__type(key, __u32);
	__type(value, struct queue);
} queues SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, struct port_key);
	__type(value, __u32);
} enqueue_ports SEC(".maps");  /* a switch port -> the queue it feeds */

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, struct port_key);
	__type(value, __u32);
} dequeue_ports SEC(".maps");  /* the far end of a switch port -> the queue it drains */

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1 << 16);
	__type(key, __u64);   /* queue << 32 | ingress ifindex */
	__type(value, __u64); /* the XOFF phase that ingress port was last told of */
} contrib SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} events SEC(".maps");

extern void *bpf_cast_to_kern_ctx(void *ctx) __ksym;

static __always_inline struct queue *find(struct __sk_buff *skb, void *ports, __u32 *id, struct port_key *key)
{
	struct sk_buff *kernel_skb = bpf_cast_to_kern_ctx(skb);
	__u32 *found;

	key->netns = BPF_CORE_READ(kernel_skb, dev, nd_net.net, net_cookie);
	key->ifindex = skb->ifindex;
	key->spare = 0;
	found = bpf_map_lookup_elem(ports, key);
	if (!found)
		return NULL;  /* a port without a queue (a host's) */
	*id = *found;
	return bpf_map_lookup_elem(&queues, id);
}

#include "balance.h"

/* Put an event on the ring; false (and counted in `lost`) when the ring refused it: full, or
 * its producers' lock not taken (the lock gives up rather than wait). */
static __always_inline bool emit(struct queue *q, __u32 id, __u32 ingress, __u32 kind, __u64 phase)
{
	struct event e = { .queue = id, .ingress = ingress, .kind = kind, .phase = phase,
			   .time_ns = bpf_ktime_get_ns() };

	if (!bpf_ringbuf_output(&events, &e, sizeof(e), 0))
		return true;
	__sync_fetch_and_add(&q->lost, 1);
	return false;
}

static __always_inline void mark(struct __sk_buff *skb, struct queue *q, __s64 occ)
{
	__u32 kmin = q->kmin, kmax = q->kmax;
	__u8 tos;

	if (!kmin || occ <= kmin)
		return;
	if (occ < kmax) {
		__u64 chance = (__u64)q->pmax * (__u64)(occ - kmin) / (__u64)(kmax - kmin);

		if ((bpf_get_prandom_u32() & (PROBABILITY_ONE - 1)) >= chance)
			return;
	}
	if (skb->protocol != bpf_htons(ETH_P_IP))
		return;
	if (bpf_skb_load_bytes(skb, ETH_HLEN + __builtin_offsetof(struct iphdr, tos), &tos, 1))
		return;
	if ((tos & ECN_MASK) == 0 || (tos & ECN_MASK) == ECN_CE)
		return;  /* not ECN-capable, or marked upstream already */
	if (bpf_skb_ecn_set_ce(skb))
		__sync_fetch_and_add(&q->marked, 1);
}

SEC("tc")
int enqueue(struct __sk_buff *skb)
{
	__u32 id, ingress;
	__u64 phase, key, *told;
	struct port_key port;
	struct queue *q = find(skb, &enqueue_ports, &id, &port);
	__s64 occ;
	int moved;

	if (!q)
		return TC_ACT_OK;
	moved = steer(skb, q, &port);
	if (moved != KEEP)
		return moved;  /* counted on the port it moves to, where this program meets it again */
	occ = __sync_fetch_and_add(&q->occ, skb->len) + skb->len - q->discount;
	if (occ > q->peak)
		q->peak = occ;
	if (q->buffer && occ > q->buffer)
		__sync_fetch_and_add(&q->late, 1);
	mark(skb, q, occ);
	if (!q->xoff || occ <= q->xoff)
		return TC_ACT_OK;
	phase = q->phase;
	if (!(phase & 1))
		__sync_val_compare_and_swap(&q->phase, phase, phase + 1);  /* even -> odd: XOFF */
	phase = q->phase;
	ingress = skb->ingress_ifindex;
	if (!(phase & 1) || !ingress)
		return TC_ACT_OK;  /* an XON overtook us, or the switch sent it itself */
	key = (__u64)id << 32 | ingress;
	told = bpf_map_lookup_elem(&contrib, &key);
	if (told && *told == phase)
		return TC_ACT_OK;
	/* Told only once the event is on the ring: a lost XOFF would leave that sender unpaused
	 * for the whole phase, free to overflow the headroom; its next packet tries again. */
	if (emit(q, id, ingress, EVENT_XOFF, phase))
		bpf_map_update_elem(&contrib, &key, &phase, BPF_ANY);
	return TC_ACT_OK;
}

/* What becomes of a frame once it is counted off: on, to the next program on the port (the ports'
 * physical layer, phy.bpf.c) and the stack; but an LLDP frame ends here. The node's lldpd has its copy already
 * (packet sockets see a frame before the ingress hook), and no protocol handler takes it: passed
 * on, the kernel would count every one as a receive drop, as it does on any port with an ingress
 * hook. A switch traps LLDP to its CPU; it is not a discard. */
static __always_inline int arrived(struct __sk_buff *skb)
{
	return skb->protocol == bpf_htons(ETH_P_LLDP) ? TC_ACT_STOLEN : TC_ACT_UNSPEC;
}

SEC("tc")
int dequeue(struct __sk_buff *skb)
{
	__u32 id;
	__u64 phase;
	struct port_key port;
	struct queue *q;
	__s64 occ;

	if (skb->mark == WIRE_CROSSED_MARK)
		return TC_ACT_UNSPEC;  /* moved here from a crossed port, counted off where it arrived */
	q = find(skb, &dequeue_ports, &id, &port);
	if (!q)
		return arrived(skb);
	occ = __sync_fetch_and_add(&q->occ, -(__s64)skb->len) - skb->len - q->discount;
	if (occ < (__s64)q->xon) {
		phase = q->phase;
		/* odd: above XOFF until now; a failed exchange: another CPU moved the phase first */
		if ((phase & 1) && __sync_val_compare_and_swap(&q->phase, phase, phase + 1) == phase)
			emit(q, id, 0, EVENT_XON, phase);
	}
	return arrived(skb);
}

char LICENSE[] SEC("license") = "GPL";
