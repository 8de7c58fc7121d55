// netdir: the architecture-neutral part of the parser, called as a
// sub-parser by the v1model and TNA top-level parsers.
//
// A netdir packet is UDP from or to NETDIR_UDP_PORT: requests go to the
// service port, replies come from it, node-to-node ops use it on both ends.
// The fixed header sits at a fixed offset, so there are no loops. A UDP
// payload shorter than the header is flagged (short_pkt) rather than
// extracted, so that the pipeline drops it with REASON_SHORT exactly as the Go
// core does, and so that the parser never reads past the packet.
#ifndef NETDIR_PARSER_P4
#define NETDIR_PARSER_P4

#include "headers.p4"

// Architecture hooks: the TNA program declares a Checksum extern here and
// subtracts the fields that the pipeline may rewrite, each in the state that
// extracts it (Tofino's rule), depositing the UDP checksum residual
// (incremental update in its deparser). v1model recomputes the checksum over
// the payload and needs none of them.
#ifndef NETDIR_PARSER_DECLS
#define NETDIR_PARSER_DECLS
#endif
#ifndef NETDIR_PARSER_IPV4_HOOK
#define NETDIR_PARSER_IPV4_HOOK
#endif
#ifndef NETDIR_PARSER_UDP_HOOK
#define NETDIR_PARSER_UDP_HOOK
#endif
#ifndef NETDIR_PARSER_NETDIR_HOOK
#define NETDIR_PARSER_NETDIR_HOOK
#endif

const bit<16> ETHERTYPE_IPV4 = 0x0800;
const bit<8>  IP_PROTO_UDP   = 17;

parser NetdirParser(packet_in pkt, out headers_t hdr, inout local_meta_t meta) {
    NETDIR_PARSER_DECLS

    state start {
        meta.is_netdir = false;
        meta.short_pkt = false;
        pkt.extract(hdr.ethernet);
        transition select(hdr.ethernet.ether_type) {
            ETHERTYPE_IPV4: parse_ipv4;
            default: accept;
        }
    }

    state parse_ipv4 {
        pkt.extract(hdr.ipv4);
        NETDIR_PARSER_IPV4_HOOK
        // No options, not a fragment, UDP: the netdir header is at a fixed offset.
        transition select(hdr.ipv4.ihl, hdr.ipv4.frag_offset, hdr.ipv4.protocol) {
            (4w5, 13w0, IP_PROTO_UDP): parse_udp;
            default: accept;
        }
    }

    state parse_udp {
        pkt.extract(hdr.udp);
        NETDIR_PARSER_UDP_HOOK
        transition select(hdr.udp.dport, hdr.udp.sport) {
            (NETDIR_UDP_PORT, _): check_len;
            (_, NETDIR_UDP_PORT): check_len;
            default: accept;
        }
    }

    state check_len {
        meta.is_netdir = true;
        // UDP length < 8 + 64 = 72: the payload cannot hold the fixed header.
        transition select(hdr.udp.len) {
            16w0 &&& 16w0xffc0: short_payload;  //  0..63
            16w64 &&& 16w0xfff8: short_payload; // 64..71
            default: parse_netdir;
        }
    }

    state short_payload {
        meta.short_pkt = true;
        transition accept;
    }

    state parse_netdir {
        pkt.extract(hdr.netdir);
        NETDIR_PARSER_NETDIR_HOOK
        transition accept;
    }
}

#endif
