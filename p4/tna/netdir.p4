// netdir for Tofino (TNA). Compiled by p4c's Tofino back end, p4c-barefoot
// (scripts/p4-build.sh, with the sizes that fit; p4/README.md, "Tofino"):
//
//   p4c-barefoot --target tofino --arch tna --std p4-16 -D__TARGET_TOFINO__=1 \
//       --disable-parse-min-depth-limit -o OUT p4/tna/netdir.p4
//
// The directory logic is shared with the BMv2 program
// (p4/include/pipeline.p4). This file adds the TNA parser (port metadata,
// checksum residual), Coherence, NodeStats and Qos written with
// RegisterActions (p4/tna/coherence.p4, p4/tna/node_stats.p4,
// p4/tna/qos.p4), the MAC timestamp as the
// clock, and the deparser checksums. Ingress decides where the packet goes
// (NetdirPipe); egress counts and stamps (NetdirTail: dmClock, hot keys),
// from flags ingress bridges to it, so that each fits its own 12 stages. A
// slot's re-seed after a promotion resubmits its first packets once,
// carrying the key's stamp floor (p4/tna/coherence.p4).
#include <core.p4>
#if __TARGET_TOFINO__ == 2
#include <t2na.p4>
#else
#include <tna.p4>
#endif

// Metadata the parser does not set starts at zero, as the shared controls
// assume; no initialising instructions in the pipeline.
@pa_auto_init_metadata

// The range keys' fields in containers whose bytes fit one ternary group of
// the input crossbar: in a 32-bit container p4c-barefoot spread the fine
// score's and the partition buckets' keys over two groups, which doubled
// their TCAM (22 blocks a score table, not 11) and took stages.
@pa_container_size("ingress", "meta.nd.lat_a_key", 16)
@pa_container_size("ingress", "meta.nd.lat_b_key", 16)
@pa_container_size("ingress", "meta.nd.partition", 8, 16)

#include "arch.p4"
#include "../include/defines.p4"
#include "../include/headers.p4"
#include "../include/parser.p4"
#include "coherence.p4"
#include "node_stats.p4"
#include "qos.p4"
#include "../include/pipeline.p4"

// The resubmit data of a re-seed's first pass (64 bits, Tofino 1's
// PORT_METADATA_SIZE): the key's stamp floor and the directory entry's gen.
header resubmit_h {
    bit<32> floor;
    bit<32> gen;
}

const ResubmitType_t RESUBMIT_RESEED = 1;

// The first egress stage of the tail (NetdirEgress).
#ifndef NETDIR_TAIL_STAGE
#define NETDIR_TAIL_STAGE 8
#endif

// What ingress tells egress, before the packet's headers: NetdirTail's
// inputs (local_meta_t's fields of the same names) and how to finish.
// The flags that separate tables write each have a byte: two tables that
// write one container cannot share a stage.
header bridged_h {
    bit<7> pad0;
    bit<1> netdir;       // hdr.netdir is valid: egress parses it
    bit<7> pad1;
    bit<1> drop;         // dropped after the verdict: counted in egress, dropped there
    bit<7> pad2;
    bit<1> csum_update;  // the sender used a UDP checksum: keep it right
    bit<3> pad3;
    bit<1> qos_request;
    bit<1> qos_stamp;
    bit<1> qos_complete;
    bit<1> count_slot;
    bit<1> count_sketch;
    slot_t slot;
    node_t target;
    node_t qos_node;
}

// Ingress metadata: the shared local_meta_t, the resubmit data and what
// egress needs.
struct ingress_meta_t {
    local_meta_t nd;
    resubmit_h   resub;
    bridged_h    bridged;
}

struct egress_meta_t {
    local_meta_t nd;
    bridged_h    bridged;
}

// local_meta_t at zero, as the shared controls assume (each parser sets
// its gress's copy; @pa_auto_init_metadata spares the instructions).
#define NETDIR_META_ZERO { \
            is_netdir = false, short_pkt = false, now = 0, op_class = 0, \
            part_hit = false, partition = 0, part_r = 0, part_head = 0, \
            pa_idx = 0, pa_node = 0, pb_idx = 0, pb_node = 0, \
            slot_hit = false, slot = 0, slot_n = 0, slot_r = 0, slot_head = 0, slot_gen = 0, slot_ver = 0, \
            chain_mask = 0, sa_idx = 0, sa_node = 0, sa_bit = 0, \
            sb_idx = 0, sb_node = 0, sb_bit = 0, sa_fresh = 0, sb_fresh = 0, \
            coh_cmd = 0, fresh = 0, coh_version = 0, \
            vsb_idx = 0, vsb_bit = 0, vsb_member = false, vsb_role = 0, from_storage = false, \
            cand_a = 0, cand_b = 0, lat_a = 0, lat_b = 0, load_a = 0, load_b = 0, \
            lat_a_key = 0, lat_b_key = 0, quota_a = 0, quota_b = 0, score_diff = 0, score_pick = 0, \
            verdict = 0, reason = 0, target = 0, egress_port = 0, \
            addr_a_mac = 0, addr_a_ip = 0, addr_a_udp = 0, addr_a_port = 0, addr_a_known = 0, \
            addr_b_mac = 0, addr_b_ip = 0, addr_b_udp = 0, addr_b_port = 0, addr_b_known = 0, \
            mcast_grp = 0, drop = false, rewritten = false, qos_done = 0, qos_res = 0, qos_node = 0, \
            udp_residual = 0, udp_csum_update = false, sample32 = 0, ts_set = 0, lat_new = 0, sample_ok = 0, \
            seed32 = 0, vn32 = 0, next_arg = 0, \
            resubmit = false, resubmitted = false, floor32 = 0, resub_gen = 0, \
            coh_pass = 0, stamp_high = 0, floor_now = 0, \
            changed = 0, moved = 0, pending = 0, stamp_is_floor = 0, stamp_is_next = 0, \
            qos_request = 0, qos_stamp = 0, qos_complete = 0, count_slot = 0, count_sketch = 0 \
}

parser NetdirIngressParser(packet_in pkt, out headers_t hdr, out ingress_meta_t meta,
                           out ingress_intrinsic_metadata_t ig_intr_md) {
    NetdirParser() netdir_parser;

    state start {
        pkt.extract(ig_intr_md);
        meta.nd = NETDIR_META_ZERO;
        meta.nd.now = (bit<64>)ig_intr_md.ingress_mac_tstamp; // ns, set here to spare a stage
        transition select(ig_intr_md.resubmit_flag) {
            1: parse_resubmit;
            default: parse_port_metadata;
        }
    }

    state parse_resubmit {
        pkt.extract(meta.resub);
        meta.nd.resubmitted = true;
        meta.nd.floor32 = meta.resub.floor;
        meta.nd.resub_gen = meta.resub.gen;
        transition parse_netdir;
    }

    state parse_port_metadata {
        pkt.advance(PORT_METADATA_SIZE);
        transition parse_netdir;
    }

    state parse_netdir {
        netdir_parser.apply(pkt, hdr, meta.nd);
        transition accept;
    }
}

control NetdirIngress(inout headers_t hdr, inout ingress_meta_t meta,
                      in ingress_intrinsic_metadata_t ig_intr_md,
                      in ingress_intrinsic_metadata_from_parser_t ig_prsr_md,
                      inout ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md,
                      inout ingress_intrinsic_metadata_for_tm_t ig_tm_md) {
    NetdirPipe() netdir;

    // The decisions after NetdirPipe as constant tables, not conditions:
    // p4c-barefoot runs a sequence of conditions one after another, a
    // stage each, while independent tables share a stage.

    // The deparser updates the UDP checksum of every netdir packet whose
    // sender used one (the parser deposits a residual for those alone):
    // for fields left unchanged the update gives the sender's checksum
    // back. Decided from the parser's output alone (decided on the
    // verdict, the deparser's condition took a stage of its own at the
    // end).
    action udp_checksummed() {
        meta.nd.udp_csum_update = true;
    }

    @hidden
    table udp_checksum {
        key = {
            hdr.netdir.isValid(): exact;
            hdr.udp.checksum: ternary;
        }
        actions = {
            udp_checksummed;
            NoAction;
        }
        const default_action = NoAction();
        const entries = {
            (true, 0): NoAction();
            (true, _): udp_checksummed();
        }
    }

    // Pass 1 of a re-seed goes back to ingress with the floor and gen;
    // otherwise multicast or unicast. Keyed by the verdict's inputs, not
    // its outputs (pipeline.p4's verdict table, whose candidate patterns
    // these repeat), so that it shares the verdict's stage: a request
    // leaves by its target's port, read by node_addr (candidate a, a
    // write's head) or node_addr_b; anything else by forwarding's.
    action resubmit_reseed() {
        ig_dprsr_md.resubmit_type = RESUBMIT_RESEED;
        meta.resub.setValid();
        meta.resub.floor = meta.nd.floor32;
        meta.resub.gen = meta.nd.slot_gen;
    }
    action multicast_vsb() {
        ig_tm_md.mcast_grp_a = VSB_MCAST_GROUP;
    }
    action unicast_a() {
        ig_tm_md.ucast_egress_port = meta.nd.addr_a_port;
    }
    action unicast_b() {
        ig_tm_md.ucast_egress_port = meta.nd.addr_b_port;
    }
    action unicast() {
        ig_tm_md.ucast_egress_port = meta.nd.egress_port;
    }

    @hidden
    table send {
        key = {
            meta.nd.resubmit: exact;
            meta.nd.reason: ternary;
            meta.nd.op_class: ternary;
            meta.nd.score_pick: ternary;
            meta.nd.score_diff[31:31]: ternary @name("score_sign");
        }
        actions = {
            resubmit_reseed;
            multicast_vsb;
            unicast_a;
            unicast_b;
            unicast;
        }
        const default_action = unicast();
        const entries = {
            (true, _, _, _, _): resubmit_reseed();
            (false, REASON_NONE, CLASS_VSB, _, _): multicast_vsb();
            (false, REASON_NONE, CLASS_GET, PICK_A, _): unicast_a();
            (false, REASON_NONE, CLASS_GET, 0, 0): unicast_a();
            (false, REASON_NONE, CLASS_GET, PICK_B, _): unicast_b();
            (false, REASON_NONE, CLASS_GET, 0, 1): unicast_b();
            (false, REASON_NONE, CLASS_WRITE, _, _): unicast_a();
        }
    }

    // A reason the lookups find drops here: the packet has nothing for the
    // tail. No node address, a reseed race and a frame no table forwards
    // may have (a hit's count, a completion): egress counts it, then drops
    // it, as one pipeline would. A request that leaves for its node tells
    // egress whether its sender used a UDP checksum (δ and ρ are
    // rewritten there). One table for both: two tables writing the bridged
    // flags took a stage each.
    action keep(bit<1> csum_update) {
        meta.bridged.drop = 0;
        meta.bridged.csum_update = csum_update;
    }
    action drop_in_egress() {
        meta.bridged.drop = 1;
        meta.bridged.csum_update = 0;
    }
    action drop_here() {
        ig_dprsr_md.drop_ctl = 1;
        meta.bridged.drop = 1;
        meta.bridged.csum_update = 0;
    }

    // Keyed by the verdict's inputs, as send: a request leaves (its
    // target has an address) or is dropped in egress.
    @hidden
    table drop_flags {
        key = {
            meta.nd.reason: ternary;
            meta.nd.drop: ternary;
            meta.nd.op_class: ternary;
            meta.nd.score_pick: ternary;
            meta.nd.score_diff[31:31]: ternary @name("score_sign");
            meta.nd.addr_a_known: ternary;
            meta.nd.addr_b_known: ternary;
            hdr.udp.checksum: ternary;
        }
        actions = {
            keep;
            drop_in_egress;
            drop_here;
        }
        const default_action = drop_here();
        const entries = {
            (REASON_NONE, false, CLASS_GET, PICK_A, _, 1, _, 0): keep(0);
            (REASON_NONE, false, CLASS_GET, PICK_A, _, 1, _, _): keep(1);
            (REASON_NONE, _, CLASS_GET, PICK_A, _, 0, _, _): drop_in_egress();
            (REASON_NONE, false, CLASS_GET, 0, 0, 1, _, 0): keep(0);
            (REASON_NONE, false, CLASS_GET, 0, 0, 1, _, _): keep(1);
            (REASON_NONE, _, CLASS_GET, 0, 0, 0, _, _): drop_in_egress();
            (REASON_NONE, false, CLASS_GET, PICK_B, _, _, 1, 0): keep(0);
            (REASON_NONE, false, CLASS_GET, PICK_B, _, _, 1, _): keep(1);
            (REASON_NONE, _, CLASS_GET, PICK_B, _, _, 0, _): drop_in_egress();
            (REASON_NONE, false, CLASS_GET, 0, 1, _, 1, 0): keep(0);
            (REASON_NONE, false, CLASS_GET, 0, 1, _, 1, _): keep(1);
            (REASON_NONE, _, CLASS_GET, 0, 1, _, 0, _): drop_in_egress();
            (REASON_NONE, false, CLASS_WRITE, _, _, 1, _, 0): keep(0);
            (REASON_NONE, false, CLASS_WRITE, _, _, 1, _, _): keep(1);
            (REASON_NONE, _, CLASS_WRITE, _, _, 0, _, _): drop_in_egress();
            (REASON_NONE, false, _, _, _, _, _, _): keep(0);
            (REASON_NONE, true, _, _, _, _, _, _): drop_in_egress();
            (REASON_RESEED_RACE, _, _, _, _, _, _, _): drop_in_egress();
        }
    }

    // Whether egress parses a netdir header.
    action bridge_netdir(bit<1> valid) {
        meta.bridged.netdir = valid;
    }

    @hidden
    table netdir_valid {
        key = {
            hdr.netdir.isValid(): exact;
        }
        actions = {
            bridge_netdir;
        }
        const default_action = bridge_netdir(0);
        const entries = {
            true: bridge_netdir(1);
        }
    }

    apply {
        netdir.apply(hdr, meta.nd, ig_intr_md.ingress_port);
        udp_checksum.apply();
        send.apply();
        drop_flags.apply();
        netdir_valid.apply();
        meta.bridged.setValid();
        meta.bridged.qos_request = meta.nd.qos_request;
        meta.bridged.qos_stamp = meta.nd.qos_stamp;
        meta.bridged.qos_complete = meta.nd.qos_complete;
        meta.bridged.count_slot = meta.nd.count_slot;
        meta.bridged.count_sketch = meta.nd.count_sketch;
        meta.bridged.slot = meta.nd.slot;
        meta.bridged.target = meta.nd.target;
        meta.bridged.qos_node = meta.nd.qos_node;
    }
}

control NetdirIngressDeparser(packet_out pkt, inout headers_t hdr, in ingress_meta_t meta,
                              in ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md) {
    Checksum() ipv4_csum;
    Checksum() udp_csum;
    Resubmit(RESUBMIT_RESEED) resubmit;

    apply {
        if (ig_dprsr_md.resubmit_type == RESUBMIT_RESEED) {
            resubmit.emit(meta.resub);
        }
        pkt.emit(meta.bridged);
        if (hdr.ipv4.isValid()) {
            hdr.ipv4.hdr_checksum = ipv4_csum.update({
                hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.dscp, hdr.ipv4.ecn,
                hdr.ipv4.total_len, hdr.ipv4.identification, hdr.ipv4.flags,
                hdr.ipv4.frag_offset, hdr.ipv4.ttl, hdr.ipv4.protocol,
                hdr.ipv4.src_addr, hdr.ipv4.dst_addr });
        }
        if (meta.nd.udp_csum_update) {
            // Add back the rewritten fields to the residual from the parser.
            hdr.udp.checksum = udp_csum.update({
                hdr.ipv4.dst_addr, hdr.udp.dport,
                hdr.netdir.flags, hdr.netdir.code, hdr.netdir.stamp,
                hdr.netdir.node, hdr.netdir.timestamp,
                meta.nd.udp_residual });
        }
        pkt.emit(hdr);
    }
}

// Egress parses what ingress sent: the bridged flags, then, for a netdir
// packet, the headers at their fixed offsets (the ingress parser checked
// them). The UDP checksum is right for ingress's rewrites; egress rewrites
// δ and ρ, so it subtracts them (and the checksum) for the residual.
parser NetdirEgressParser(packet_in pkt, out headers_t hdr, out egress_meta_t meta,
                          out egress_intrinsic_metadata_t eg_intr_md) {
    Checksum() udp_csum;

    state start {
        pkt.extract(eg_intr_md);
        pkt.extract(meta.bridged);
        meta.nd = NETDIR_META_ZERO;
        transition select(meta.bridged.netdir) {
            1: parse_ethernet;
            default: accept;
        }
    }

    state parse_ethernet {
        pkt.extract(hdr.ethernet);
        transition parse_ipv4;
    }

    state parse_ipv4 {
        pkt.extract(hdr.ipv4);
        transition parse_udp;
    }

    state parse_udp {
        pkt.extract(hdr.udp);
        udp_csum.subtract({ hdr.udp.checksum });
        transition parse_netdir;
    }

    state parse_netdir {
        pkt.extract(hdr.netdir);
        udp_csum.subtract({ hdr.netdir.delta, hdr.netdir.rho });
        udp_csum.subtract_all_and_deposit(meta.nd.udp_residual);
        transition accept;
    }
}

control NetdirEgress(inout headers_t hdr, inout egress_meta_t meta,
                     in egress_intrinsic_metadata_t eg_intr_md,
                     in egress_intrinsic_metadata_from_parser_t eg_prsr_md,
                     inout egress_intrinsic_metadata_for_deparser_t eg_dprsr_md,
                     inout egress_intrinsic_metadata_for_output_port_t eg_oport_md) {
    NetdirTail() tail;

    action take_bridged() {
        meta.nd.qos_request = meta.bridged.qos_request;
        meta.nd.qos_stamp = meta.bridged.qos_stamp;
        meta.nd.qos_complete = meta.bridged.qos_complete;
        meta.nd.count_slot = meta.bridged.count_slot;
        meta.nd.count_sketch = meta.bridged.count_sketch;
        meta.nd.slot = meta.bridged.slot;
        meta.nd.target = meta.bridged.target;
        meta.nd.qos_node = meta.bridged.qos_node;
    }

    // Egress shares each stage's tables and memories with ingress, whose
    // lookups need the first stages. The tail's inputs come from this
    // table, placed no earlier than NETDIR_TAIL_STAGE, so every table
    // of the tail comes after it.
    @hidden
    @stage(NETDIR_TAIL_STAGE)
    table bridged_in {
        actions = {
            take_bridged;
        }
        const default_action = take_bridged();
    }

    apply {
        bridged_in.apply();
        tail.apply(hdr, meta.nd);
        // Only a stamp rewrites here (δ, ρ).
        if (meta.nd.qos_stamp == 1 && meta.bridged.csum_update == 1) {
            meta.nd.udp_csum_update = true;
        } else {
            meta.nd.udp_csum_update = false;
        }
        if (meta.bridged.drop == 1) {
            eg_dprsr_md.drop_ctl = 1;
        }
    }
}

control NetdirEgressDeparser(packet_out pkt, inout headers_t hdr, in egress_meta_t meta,
                             in egress_intrinsic_metadata_for_deparser_t eg_dprsr_md) {
    Checksum() udp_csum;

    apply {
        if (meta.nd.udp_csum_update) {
            hdr.udp.checksum = udp_csum.update({
                hdr.netdir.delta, hdr.netdir.rho, meta.nd.udp_residual });
        }
        pkt.emit(hdr);
    }
}

Pipeline(NetdirIngressParser(), NetdirIngress(), NetdirIngressDeparser(),
         NetdirEgressParser(), NetdirEgress(), NetdirEgressDeparser()) pipe;

Switch(pipe) main;
