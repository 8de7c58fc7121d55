// netdir for BMv2 simple_switch_grpc (v1model).
//
//   p4c-bm2-ss --p4runtime-files p4/build/netdir.p4info.txtpb \
//       -o p4/build/netdir.json p4/v1model/netdir.p4
//
// (scripts/p4-build.sh, `make p4`.) The directory logic is shared with the
// TNA program (p4/include/pipeline.p4); this file adds the v1model parser
// and deparser, the register-based Coherence, NodeStats and Qos controls, the
// injectable clock, and the checksum recomputation.
#include <core.p4>
#include <v1model.p4>

#include "arch.p4"
#include "../include/defines.p4"
#include "../include/headers.p4"
#include "../include/parser.p4"
#include "../include/coherence.p4"
#include "../include/node_stats.p4"
#include "../include/qos.p4"
#include "../include/pipeline.p4"
#include "clock.p4"

parser NetdirV1Parser(packet_in pkt, out headers_t hdr, inout local_meta_t meta,
                      inout standard_metadata_t standard_metadata) {
    NetdirParser() netdir_parser;

    state start {
        netdir_parser.apply(pkt, hdr, meta);
        transition accept;
    }
}

control NetdirVerifyChecksum(inout headers_t hdr, inout local_meta_t meta) {
    apply { }
}

control NetdirIngress(inout headers_t hdr, inout local_meta_t meta,
                      inout standard_metadata_t standard_metadata) {
    Clock() clock;
    NetdirPipe() netdir;
    NetdirTail() tail;

    apply {
        clock.apply(meta, standard_metadata.ingress_global_timestamp);
        netdir.apply(hdr, meta, standard_metadata.ingress_port);
        // One pipeline here: the tail (dmClock, hot keys) right after the
        // decision, before any drop, as the contract counts.
        tail.apply(hdr, meta);
        if (meta.drop || meta.reason != REASON_NONE) {
            mark_to_drop(standard_metadata);
        } else if (meta.mcast_grp != 0) {
            standard_metadata.mcast_grp = meta.mcast_grp;
        } else {
            standard_metadata.egress_spec = meta.egress_port;
        }
    }
}

control NetdirEgress(inout headers_t hdr, inout local_meta_t meta,
                     inout standard_metadata_t standard_metadata) {
    apply { }
}

control NetdirComputeChecksum(inout headers_t hdr, inout local_meta_t meta) {
    apply {
        update_checksum(hdr.ipv4.isValid(),
            { hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.dscp, hdr.ipv4.ecn,
              hdr.ipv4.total_len, hdr.ipv4.identification, hdr.ipv4.flags,
              hdr.ipv4.frag_offset, hdr.ipv4.ttl, hdr.ipv4.protocol,
              hdr.ipv4.src_addr, hdr.ipv4.dst_addr },
            hdr.ipv4.hdr_checksum, HashAlgorithm.csum16);
        // The UDP checksum covers the pseudo-header, the UDP header, the
        // netdir header and the payload (key and value). Recomputed only when
        // the pipeline rewrote the packet and the sender used a checksum.
        update_checksum_with_payload(
            hdr.udp.isValid() && hdr.netdir.isValid() && meta.rewritten && hdr.udp.checksum != 0,
            { hdr.ipv4.src_addr, hdr.ipv4.dst_addr, 8w0, hdr.ipv4.protocol, hdr.udp.len,
              hdr.udp.sport, hdr.udp.dport, hdr.udp.len,
              hdr.netdir.magic, hdr.netdir.version, hdr.netdir.op, hdr.netdir.flags,
              hdr.netdir.code, hdr.netdir.tenant, hdr.netdir.reqid, hdr.netdir.keyhash,
              hdr.netdir.stamp, hdr.netdir.node, hdr.netdir.load, hdr.netdir.epoch,
              hdr.netdir.timestamp, hdr.netdir.delta, hdr.netdir.rho },
            hdr.udp.checksum, HashAlgorithm.csum16);
    }
}

control NetdirDeparser(packet_out pkt, in headers_t hdr) {
    apply {
        pkt.emit(hdr.ethernet);
        pkt.emit(hdr.ipv4);
        pkt.emit(hdr.udp);
        pkt.emit(hdr.netdir);
    }
}

V1Switch(NetdirV1Parser(), NetdirVerifyChecksum(), NetdirIngress(), NetdirEgress(),
         NetdirComputeChecksum(), NetdirDeparser()) main;
