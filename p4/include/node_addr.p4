// netdir: where storage node n is. node_addr and node_addr_b: exact on the
// node id -> the node's MAC, IPv4 address, UDP port and switch egress port.
// The controller installs the same entries in both. Each reads one
// candidate's address before the verdict (node_addr candidate a, which is a
// write's head too; node_addr_b candidate b): they have no side effect, so
// on Tofino they run beside the stats reads, and the verdict's `address`
// table copies the address of the candidate it takes, in the verdict's
// stage, instead of a lookup of the target after it (a stage). A request
// forwarded to node n gets those as its destination; the checksums are fixed
// in the deparser (v1model: recomputed; TNA: incremental). Source addresses
// are kept, so the node replies to the client directly through the switch.
// A target without an entry is dropped and counted under
// REASON_NO_NODE_ADDR (a P4-only reason, past directory.Reason's list).
#ifndef NETDIR_NODE_ADDR_P4
#define NETDIR_NODE_ADDR_P4

#include "headers.p4"

control NodeAddr(inout local_meta_t meta) {
    action set_node_addr(bit<48> mac, bit<32> ip, bit<16> udp_port, port_t port) {
        meta.addr_a_mac = mac;
        meta.addr_a_ip = ip;
        meta.addr_a_udp = udp_port;
        meta.addr_a_port = port;
        meta.addr_a_known = 1;
    }

    table node_addr {
        key = {
            meta.cand_a: exact @name("node");
        }
        actions = {
            set_node_addr;
            @defaultonly NoAction;
        }
        const default_action = NoAction();
        size = NETDIR_MAX_NODES;
    }

    action set_node_addr_b(bit<48> mac, bit<32> ip, bit<16> udp_port, port_t port) {
        meta.addr_b_mac = mac;
        meta.addr_b_ip = ip;
        meta.addr_b_udp = udp_port;
        meta.addr_b_port = port;
        meta.addr_b_known = 1;
    }

    table node_addr_b {
        key = {
            meta.cand_b: exact @name("node");
        }
        actions = {
            set_node_addr_b;
            @defaultonly NoAction;
        }
        const default_action = NoAction();
        size = NETDIR_MAX_NODES;
    }

    apply {
        node_addr.apply();
        node_addr_b.apply();
    }
}

#endif
