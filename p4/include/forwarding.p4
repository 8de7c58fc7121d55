// netdir: plain forwarding for everything that is not a directory decision:
// replies to clients, node-to-node ops, and non-netdir traffic.
//   routes_v4  LPM on the IPv4 destination -> egress port, source and
//              destination MAC; TTL decremented.
//   bridging   exact on the destination MAC -> egress port, for what no
//              route covers (and non-IPv4 frames).
// A frame that neither table matches is dropped (not counted as a netdir
// drop reason).
#ifndef NETDIR_FORWARDING_P4
#define NETDIR_FORWARDING_P4

#include "headers.p4"

control Forwarding(inout headers_t hdr, inout local_meta_t meta) {
    action route(port_t port, bit<48> smac, bit<48> dmac) {
        meta.egress_port = port;
        hdr.ethernet.src_addr = smac;
        hdr.ethernet.dst_addr = dmac;
        hdr.ipv4.ttl = hdr.ipv4.ttl - 1;
    }

    table routes_v4 {
        key = {
            hdr.ipv4.dst_addr: lpm @name("ipv4_dst");
        }
        actions = {
            route;
            @defaultonly NoAction;
        }
        const default_action = NoAction();
        size = NETDIR_ROUTES;
    }

    action bridge(port_t port) {
        meta.egress_port = port;
    }

    action l2_miss() {
        meta.drop = true;
    }

    table bridging {
        key = {
            hdr.ethernet.dst_addr: exact @name("eth_dst");
        }
        actions = {
            bridge;
            @defaultonly l2_miss;
        }
        const default_action = l2_miss();
        size = NETDIR_L2;
    }

    apply {
        bool routed = false;
        if (hdr.ipv4.isValid() && hdr.ipv4.ttl > 1) {
            if (routes_v4.apply().hit) {
                routed = true;
            }
        }
        if (!routed) {
            bridging.apply();
        }
    }
}

#endif
