// SPDX-License-Identifier: GPL-2.0
/* BFD's steady state in the kernel, as a switch ASIC keeps it in hardware (lab/bfd/fastpath.py).
 * Once a session is Up and quiet, every packet its peer sends is the same 24 bytes and every packet
 * it sends is the same frame; the lab's BFD data plane then hands both to these programs and keeps
 * only what changes (a state, a Poll, a timer) and the detection timer.
 *
 * `bfd_receive` (every switch port's ingress, after the physical layer's program, so a faulty link
 * loses BFD's packets as it loses any): a single-hop control packet equal to its session's
 * expected one ends here, stamped; any other goes on to the data plane's socket.
 * `bfd_tick` (a switch's loopback egress): the data plane sends one tick per switch per interval;
 * the program writes each armed session's frame over it and sends a copy out of that session's
 * port (bpf_clone_redirect: through the port's egress programs and queues, as any packet), then
 * drops the tick.
 */
#include "vmlinux.h"
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "bfd.h"

#define TC_ACT_OK 0
#define TC_ACT_SHOT 2
#define ETH_P_IP 0x0800
#define ETH_HLEN 14
#define IPPROTO_UDP 17
#define BFD_PORT 3784
#define BFD_TTL 255
#define IP_FRAGMENTS 0x3FFF  /* MF and the offset */

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);  /* sized to the lab's sessions at load */
	__type(key, struct bfd_key);
	__type(value, __u32);  /* the session's element of bfd_rx and bfd_tx */
} bfd_index SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_MMAPABLE);  /* the data plane reads last_ns without a system call */
	__type(key, __u32);
	__type(value, struct bfd_rx);
} bfd_rx SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct bfd_tx);
} bfd_tx SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);  /* one per switch */
	__type(key, __u64);      /* the switch's namespace cookie */
	__type(value, struct bfd_switch);
} bfd_switches SEC(".maps");

extern void *bpf_cast_to_kern_ctx(void *ctx) __ksym;

/* The cookie of the namespace of the packet's device (bpf_get_netns_cookie() answers the initial
 * namespace's for a packet without a socket: every one received). */
static __always_inline __u64 device_netns(struct __sk_buff *skb)
{
	struct sk_buff *kernel_skb = bpf_cast_to_kern_ctx(skb);

	return BPF_CORE_READ(kernel_skb, dev, nd_net.net, net_cookie);
}

/* The UDP payload's offset when the frame is IPv4/UDP to `port` with no IP options, else 0. */
static __always_inline __u32 udp_payload(struct __sk_buff *skb, __u16 port, __u8 *ttl)
{
	struct iphdr ip;
	struct udphdr udp;

	if (skb->protocol != bpf_htons(ETH_P_IP))
		return 0;
	if (bpf_skb_load_bytes(skb, ETH_HLEN, &ip, sizeof(ip)) || ip.ihl != 5 || ip.protocol != IPPROTO_UDP ||
	    (bpf_ntohs(ip.frag_off) & IP_FRAGMENTS))
		return 0;
	if (bpf_skb_load_bytes(skb, ETH_HLEN + sizeof(ip), &udp, sizeof(udp)) || udp.dest != bpf_htons(port))
		return 0;
	*ttl = ip.ttl;
	return ETH_HLEN + sizeof(ip) + sizeof(udp);
}

/* Equal control packets, three words at a time (clang calls memcmp for __builtin_memcmp here). */
static __always_inline int same_control(const __u8 *a, const __u8 *b)
{
	__u64 x[3], y[3];

	__builtin_memcpy(x, a, sizeof(x));
	__builtin_memcpy(y, b, sizeof(y));
	return x[0] == y[0] && x[1] == y[1] && x[2] == y[2];
}

SEC("tc")
int bfd_receive(struct __sk_buff *skb)
{
	__u8 packet[BFD_CONTROL_LEN];
	struct bfd_key key = {};
	struct bfd_rx *rx;
	struct ethhdr eth;
	__u32 *slot;
	__u8 ttl = 0;
	__u32 offset = udp_payload(skb, BFD_PORT, &ttl);

	if (!offset || ttl != BFD_TTL || skb->len != offset + BFD_CONTROL_LEN)
		return TC_ACT_OK;  /* not a single-hop control packet without authentication */
	if (bpf_skb_load_bytes(skb, offset, packet, sizeof(packet)) || bpf_skb_load_bytes(skb, 0, &eth, sizeof(eth)))
		return TC_ACT_OK;
	key.netns = device_netns(skb);
	__builtin_memcpy(&key.discr, &packet[8], 4);  /* Your Discriminator, as the wire has it */
	key.discr = bpf_ntohl(key.discr);
	slot = bpf_map_lookup_elem(&bfd_index, &key);
	if (!slot)
		return TC_ACT_OK;
	rx = bpf_map_lookup_elem(&bfd_rx, slot);
	if (!rx)
		return TC_ACT_OK;
	__builtin_memcpy(rx->peer_mac, eth.h_source, 6);
	__builtin_memcpy(rx->local_mac, eth.h_dest, 6);
	rx->ifindex = skb->ifindex;
	if (!rx->armed || !same_control(packet, rx->expect))
		return TC_ACT_OK;
	rx->last_ns = bpf_ktime_get_ns();
	__sync_fetch_and_add(&rx->packets, 1);
	return TC_ACT_SHOT;
}

SEC("tc")
int bfd_tick(struct __sk_buff *skb)
{
	struct bfd_switch *sw;
	struct bfd_tx *tx;
	__u8 ttl = 0;
	__u64 netns;
	__u32 i, slot;

	if (!udp_payload(skb, BFD_TICK_PORT, &ttl) || skb->len != BFD_FRAME_LEN)
		return TC_ACT_OK;
	netns = device_netns(skb);
	sw = bpf_map_lookup_elem(&bfd_switches, &netns);
	if (!sw)
		return TC_ACT_SHOT;
	for (i = 0; i < BFD_MAX_PER_SWITCH; i++) {
		if (i >= sw->count)
			break;
		slot = sw->slots[i];
		tx = bpf_map_lookup_elem(&bfd_tx, &slot);
		if (!tx || !tx->armed)
			continue;
		if (bpf_skb_store_bytes(skb, 0, tx->frame, BFD_FRAME_LEN, 0))
			break;
		if (!bpf_clone_redirect(skb, tx->ifindex, 0))
			__sync_fetch_and_add(&tx->packets, 1);
	}
	return TC_ACT_SHOT;
}

char LICENSE[] SEC("license") = "GPL";
