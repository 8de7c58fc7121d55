// netdir: where storage node n is. node_addr: exact on the node id -> the
// node's MAC, IPv4 address, UDP port and switch egress port. A request
// forwarded to node n gets those as its destination; the checksums are fixed
// in the deparser (v1model: recomputed; TNA: incremental). Source addresses
// are kept, so the node replies to the client directly through the switch.
// A target without an entry is dropped and counted under
// REASON_NO_NODE_ADDR (a P4-only reason, past directory.Reason's list).
#ifndef NETDIR_NODE_ADDR_P4
#define NETDIR_NODE_ADDR_P4

#include "headers.p4"

control NodeAddr(inout headers_t hdr, inout local_meta_t meta) {
    action set_node_addr(bit<48> mac, bit<32> ip, bit<16> udp_port, port_t port) {
        hdr.ethernet.dst_addr = mac;
        hdr.ipv4.dst_addr = ip;
        hdr.udp.dport = udp_port;
        meta.egress_port = port;
        meta.rewritten = true;
        meta.qos_stamp = 1; // the request leaves for its node: NetdirTail stamps it
    }

    action unknown_node() {
        meta.reason = REASON_NO_NODE_ADDR;
    }

    table node_addr {
        key = {
            meta.target: exact @name("node");
        }
        actions = {
            set_node_addr;
            @defaultonly unknown_node;
        }
        const default_action = unknown_node();
        size = NETDIR_MAX_NODES;
    }

    apply {
        node_addr.apply();
    }
}

#endif
