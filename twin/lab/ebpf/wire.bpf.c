// SPDX-License-Identifier: GPL-2.0
/* Two of a host's ports with their cables swapped at the far end (faults/miswire.py): what NIC A
 * sends leaves by B's wire, what arrives on A's wire reaches B, and the other way round; each
 * port keeps its name, address, MAC and sockets, as a physical NIC does when its cable is moved.
 *
 *   cross_out  clsact egress of A and B, before anything else there: a frame the host sent by
 *              this port is marked and redirected out of the partner; on the partner it is
 *              unmarked and goes on to that port's qdisc (its shaping and PFC gate: the wire it
 *              now leaves by).
 *   cross_in   clsact ingress of A and B, after the queue program that counts the frame off the
 *              far switch port's queue (queues.bpf.c `dequeue`, which passes marked frames by):
 *              a frame off this port's wire is marked and redirected into the partner's ingress;
 *              there it is unmarked and received.
 *
 * One object per fault: `partners` maps each of the two ifindexes to the other. LLDP frames from the
 * leaves are not crossed but end here (or at the queue program before): hosts only send LLDP
 * (lab/lldp.py).
 */
#include "vmlinux.h"
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "wire.h"

#define TC_ACT_UNSPEC (-1)
#define TC_ACT_OK 0
#define BPF_F_INGRESS 1

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 2);
	__type(key, __u32);   /* ifindex */
	__type(value, __u32); /* the ifindex of the port whose cable it now has */
} partners SEC(".maps");

SEC("tc")
int cross_out(struct __sk_buff *skb)
{
	__u32 ifindex = skb->ifindex, *partner;  /* a map key must be on the stack, not in the context */

	if (skb->mark == WIRE_CROSSED_MARK) {
		skb->mark = 0;
		return TC_ACT_UNSPEC;  /* moved here from the partner: on to this port's qdisc */
	}
	partner = bpf_map_lookup_elem(&partners, &ifindex);
	if (!partner)
		return TC_ACT_UNSPEC;
	skb->mark = WIRE_CROSSED_MARK;
	return bpf_redirect(*partner, 0);
}

SEC("tc")
int cross_in(struct __sk_buff *skb)
{
	__u32 ifindex = skb->ifindex, *partner;  /* a map key must be on the stack, not in the context */

	if (skb->mark == WIRE_CROSSED_MARK) {
		skb->mark = 0;
		return TC_ACT_OK;  /* moved here from the partner's wire: received by this port */
	}
	if (skb->protocol == bpf_htons(ETH_P_LLDP))
		return TC_ACT_STOLEN;  /* hosts only send LLDP; passed on, the stack would count a drop */
	partner = bpf_map_lookup_elem(&partners, &ifindex);
	if (!partner)
		return TC_ACT_UNSPEC;
	skb->mark = WIRE_CROSSED_MARK;
	return bpf_redirect(*partner, BPF_F_INGRESS);
}

char LICENSE[] SEC("license") = "GPL";
