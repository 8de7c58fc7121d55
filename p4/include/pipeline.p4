// netdir: the directory contract as one ingress control, shared by the
// v1model and TNA programs. It reproduces directory.Directory.Process
// (directory/process.go) for ModeToR and PolicyNetdir; the shared vector suite
// (testdata/vectors) holds it to the Go core on BMv2 (p4/bmv2test).
//
// Before including this file, a top-level program defines the architecture's
// Coherence, NodeStats and Qos controls and the NETDIR_COUNTER/NETDIR_COUNT macros.
// Every table, counter and register is used at most once per packet, as
// Tofino requires.
//
// Two controls: NetdirPipe decides where the packet goes (and rewrites the
// headers that decision names); NetdirTail only counts and stamps (dmClock,
// hot keys), from flags NetdirPipe leaves in meta. v1model applies both in
// ingress; TNA applies NetdirTail in the egress pipeline, with those flags
// bridged (p4/tna/netdir.p4), so that ingress's 12 stages hold the decision.
//
// Counters (indexed, packets; read over P4Runtime):
//   events    index EVENT_HIT, EVENT_MISS, EVENT_REPLY, EVENT_VSB, EVENT_PASS
//   switched  index 0: the fine score picked candidate b
//   drops     index directory.Reason (1..10), plus REASON_NO_NODE_ADDR (11)
//             and, on TNA, REASON_RESEED_RACE (12)
#ifndef NETDIR_PIPELINE_P4
#define NETDIR_PIPELINE_P4

#include "headers.p4"
#include "directory.p4"
#include "partition.p4"
#include "split.p4"
#include "hot_keys.p4"
#include "vsb_filter.p4"
#include "fine_score.p4"
#include "node_addr.p4"
#include "forwarding.p4"

control NetdirPipe(inout headers_t hdr, inout local_meta_t meta, in port_t ingress_port) {
    Directory() directory;
    Partition() partition;
    SlotSplit() split;
    CandidatesFresh() candidates_fresh;
    Coherence() coherence;
    VsbFilter() vsb_filter;
    NodeStats() node_stats;
    FineScore() fine_score;
    NodeAddr() node_addr;
    Forwarding() forwarding;

    NETDIR_COUNTER(events, NETDIR_NUM_EVENTS);
    NETDIR_COUNTER(switched, 1);
    NETDIR_COUNTER(drops, NETDIR_NUM_REASONS);

    // Section 3 of apply, by class: the coherence command of a hit, or
    // the drop reason decided by the lookups. Entries in priority order.
    action set_command(bit<3> cmd) {
        meta.coh_cmd = cmd;
    }

    action set_drop_reason(bit<8> reason) {
        meta.reason = reason;
    }

    action set_class(bit<3> op_class) {
        meta.op_class = op_class;
    }

    // Section 2b's candidates, as a table rather than a condition (on
    // Tofino a condition's branch was placed only after the coherence
    // chain): a GET's two by the slot's split on a hit, else by the
    // partition's buckets; a write's head (candidate a, whose address
    // node_addr reads); a reply's stats node (TNA's node stats index by
    // the candidates). Only a GET, a write and a reply read them.
    action cand_slot() {
        meta.cand_a = meta.sa_node;
        meta.cand_b = meta.sb_node;
    }

    action cand_partition() {
        meta.cand_a = meta.pa_node;
        meta.cand_b = meta.pb_node;
    }

    action cand_reply() {
        meta.cand_a = hdr.netdir.node;
        meta.cand_b = hdr.netdir.node;
    }

    action cand_slot_head() {
        meta.cand_a = meta.slot_head;
    }

    action cand_part_head() {
        meta.cand_a = meta.part_head;
    }

    @hidden
    table candidates {
        key = {
            meta.op_class: ternary;
            meta.slot_hit: exact;
        }
        actions = {
            cand_slot;
            cand_partition;
            cand_reply;
            cand_slot_head;
            cand_part_head;
        }
        const default_action = cand_partition();
        const entries = {
            (CLASS_WRITE, false): cand_part_head();
            (CLASS_WRITE, true): cand_slot_head();
            (CLASS_REPLY, false): cand_reply();
            (CLASS_REPLY, true): cand_reply();
            (CLASS_WREPLY, false): cand_reply();
            (CLASS_WREPLY, true): cand_reply();
            (_, true): cand_slot();
        }
    }

    // Section 1 of apply: a netdir packet's parse checks and op class, in
    // directory.Process's order (entries in priority order), as one
    // constant table (on Tofino one logical table, not a gateway and an
    // assignment per case). A short packet has no netdir header.
    @hidden
    table classify {
        key = {
            meta.short_pkt: exact;
            hdr.netdir.isValid(): exact;
            hdr.netdir.magic: ternary;
            hdr.netdir.version: ternary;
            hdr.netdir.op: ternary;
        }
        actions = {
            set_class;
            set_drop_reason;
            NoAction;
        }
        const default_action = NoAction();
        const entries = {
            (true, false, _, _, _): set_drop_reason(REASON_SHORT);
            (false, false, _, _, _): set_drop_reason(REASON_SHORT);
            (false, true, NETDIR_MAGIC, NETDIR_VERSION, OP_GET): set_class(CLASS_GET);
            (false, true, NETDIR_MAGIC, NETDIR_VERSION, OP_PUT): set_class(CLASS_WRITE);
            (false, true, NETDIR_MAGIC, NETDIR_VERSION, OP_DEL): set_class(CLASS_WRITE);
            (false, true, NETDIR_MAGIC, NETDIR_VERSION, OP_GET_REPLY): set_class(CLASS_REPLY);
            (false, true, NETDIR_MAGIC, NETDIR_VERSION, OP_ERR): set_class(CLASS_REPLY);
            (false, true, NETDIR_MAGIC, NETDIR_VERSION, OP_PUT_REPLY): set_class(CLASS_WREPLY);
            (false, true, NETDIR_MAGIC, NETDIR_VERSION, OP_DEL_REPLY): set_class(CLASS_WREPLY);
            (false, true, NETDIR_MAGIC, NETDIR_VERSION, OP_VSB): set_class(CLASS_VSB);
            (false, true, NETDIR_MAGIC, NETDIR_VERSION, OP_NODE_MIN &&& OP_NODE_MASK): set_class(CLASS_NODE_OP);
            (false, true, NETDIR_MAGIC, NETDIR_VERSION, _): set_drop_reason(REASON_UNKNOWN_OP);
            (false, true, NETDIR_MAGIC, _, _): set_drop_reason(REASON_VERSION);
            (false, true, _, _, _): set_drop_reason(REASON_MAGIC);
        }
    }

    @hidden
    table commands {
        key = {
            meta.op_class: exact;
            meta.slot_hit: exact;
            meta.part_hit: exact;
            meta.from_storage: exact;
            meta.vsb_member: exact;
            hdr.netdir.code: ternary;
        }
        actions = {
            set_command;
            set_drop_reason;
            NoAction;
        }
        const default_action = NoAction();
        const entries = {
            (CLASS_GET, false, false, false, false, _): set_drop_reason(REASON_NO_ROUTE);
            (CLASS_WRITE, false, false, false, false, _): set_drop_reason(REASON_NO_ROUTE);
            (CLASS_VSB, false, false, false, false, _): set_drop_reason(REASON_VSB_PORT);
            (CLASS_GET, false, false, false, true, _): set_drop_reason(REASON_NO_ROUTE);
            (CLASS_WRITE, false, false, false, true, _): set_drop_reason(REASON_NO_ROUTE);
            (CLASS_VSB, false, false, false, true, _): set_drop_reason(REASON_VSB_PORT);
            (CLASS_GET, false, false, true, false, _): set_drop_reason(REASON_NO_ROUTE);
            (CLASS_WRITE, false, false, true, false, _): set_drop_reason(REASON_NO_ROUTE);
            (CLASS_VSB, false, false, true, false, _): set_drop_reason(REASON_VSB_NOT_CACHED);
            (CLASS_GET, false, false, true, true, _): set_drop_reason(REASON_NO_ROUTE);
            (CLASS_WRITE, false, false, true, true, _): set_drop_reason(REASON_NO_ROUTE);
            (CLASS_VSB, false, false, true, true, _): set_drop_reason(REASON_VSB_NOT_CACHED);
            (CLASS_VSB, false, true, false, false, _): set_drop_reason(REASON_VSB_PORT);
            (CLASS_VSB, false, true, false, true, _): set_drop_reason(REASON_VSB_PORT);
            (CLASS_VSB, false, true, true, false, _): set_drop_reason(REASON_VSB_NOT_CACHED);
            (CLASS_VSB, false, true, true, true, _): set_drop_reason(REASON_VSB_NOT_CACHED);
            (CLASS_GET, true, false, false, false, _): set_command(COH_READ);
            (CLASS_WRITE, true, false, false, false, _): set_command(COH_STAMP);
            (CLASS_WREPLY, true, false, false, false, CODE_OK): set_command(COH_COMPLETE);
            (CLASS_VSB, true, false, false, false, _): set_drop_reason(REASON_VSB_PORT);
            (CLASS_GET, true, false, false, true, _): set_command(COH_READ);
            (CLASS_WRITE, true, false, false, true, _): set_command(COH_STAMP);
            (CLASS_WREPLY, true, false, false, true, CODE_OK): set_command(COH_COMPLETE);
            (CLASS_VSB, true, false, false, true, _): set_drop_reason(REASON_VSB_PORT);
            (CLASS_GET, true, false, true, false, _): set_command(COH_READ);
            (CLASS_WRITE, true, false, true, false, _): set_command(COH_STAMP);
            (CLASS_WREPLY, true, false, true, false, CODE_OK): set_command(COH_COMPLETE);
            (CLASS_VSB, true, false, true, false, _): set_drop_reason(REASON_VSB_NOT_MEMBER);
            (CLASS_GET, true, false, true, true, _): set_command(COH_READ);
            (CLASS_WRITE, true, false, true, true, _): set_command(COH_STAMP);
            (CLASS_WREPLY, true, false, true, true, CODE_OK): set_command(COH_COMPLETE);
            (CLASS_VSB, true, false, true, true, _): set_command(COH_VSB);
            (CLASS_GET, true, true, false, false, _): set_command(COH_READ);
            (CLASS_WRITE, true, true, false, false, _): set_command(COH_STAMP);
            (CLASS_WREPLY, true, true, false, false, CODE_OK): set_command(COH_COMPLETE);
            (CLASS_VSB, true, true, false, false, _): set_drop_reason(REASON_VSB_PORT);
            (CLASS_GET, true, true, false, true, _): set_command(COH_READ);
            (CLASS_WRITE, true, true, false, true, _): set_command(COH_STAMP);
            (CLASS_WREPLY, true, true, false, true, CODE_OK): set_command(COH_COMPLETE);
            (CLASS_VSB, true, true, false, true, _): set_drop_reason(REASON_VSB_PORT);
            (CLASS_GET, true, true, true, false, _): set_command(COH_READ);
            (CLASS_WRITE, true, true, true, false, _): set_command(COH_STAMP);
            (CLASS_WREPLY, true, true, true, false, CODE_OK): set_command(COH_COMPLETE);
            (CLASS_VSB, true, true, true, false, _): set_drop_reason(REASON_VSB_NOT_MEMBER);
            (CLASS_GET, true, true, true, true, _): set_command(COH_READ);
            (CLASS_WRITE, true, true, true, true, _): set_command(COH_STAMP);
            (CLASS_WREPLY, true, true, true, true, CODE_OK): set_command(COH_COMPLETE);
            (CLASS_VSB, true, true, true, true, _): set_command(COH_VSB);
        }
    }

    // Section 4, the verdict, as one constant table (on Tofino one logical
    // table, not a gateway and an assignment per branch; its counts in the
    // actions). A GET's target by the fine score, as directory.finer: an
    // unlearnt a first, then an unlearnt b (FineScore's score_pick), then
    // the larger score (the sign of FineScore's difference), ties to a.
    // Two candidates of one bucket are one node, whose two stats reads
    // agree, so the score keeps a for them, as the contract's equal-bucket
    // case does, and needs no test of its own. A hit's marks: verify when
    // the candidate taken is not fresh (issue 18).
    // The target's address: node_addr read both candidates' (section 2b),
    // the verdict's action copies the one it takes, in the verdict's
    // stage. leaves: the target has an address, and the request leaves for
    // its node (NetdirTail stamps it); else addr_reason drops it
    // (REASON_NO_NODE_ADDR) and the address copied, none, is never sent
    // (NETDIR_ADDR_REASON: v1model's top level drops by it; TNA reads none).
    // On Tofino everything after the verdict (switched and drops here, the
    // top level's drop and send tables) is keyed by the verdict's own
    // inputs, not its outputs, so that all of it shares the verdict's stage.
    action address_a(@noWarn("unused") bit<8> addr_reason, bit<1> leaves) {
        hdr.ethernet.dst_addr = meta.addr_a_mac;
        hdr.ipv4.dst_addr = meta.addr_a_ip;
        hdr.udp.dport = meta.addr_a_udp;
        NETDIR_NODE_PORT(meta.addr_a_port);
        meta.rewritten = true;
        meta.qos_stamp = leaves;
        NETDIR_ADDR_REASON(addr_reason);
        meta.target = meta.cand_a;
        hdr.netdir.node = meta.cand_a;
        hdr.netdir.timestamp = meta.now;
        meta.verdict = OUT_FORWARD;
    }

    action address_b(@noWarn("unused") bit<8> addr_reason, bit<1> leaves) {
        hdr.ethernet.dst_addr = meta.addr_b_mac;
        hdr.ipv4.dst_addr = meta.addr_b_ip;
        hdr.udp.dport = meta.addr_b_udp;
        NETDIR_NODE_PORT(meta.addr_b_port);
        meta.rewritten = true;
        meta.qos_stamp = leaves;
        NETDIR_ADDR_REASON(addr_reason);
        meta.target = meta.cand_b;
        hdr.netdir.node = meta.cand_b;
        hdr.netdir.timestamp = meta.now;
        meta.verdict = OUT_FORWARD;
    }

    action get_hit_a(bit<8> addr_reason, bit<1> leaves, bit<4> marks) {
        address_a(addr_reason, leaves);
        NETDIR_COUNT(events, EVENT_HIT);
        meta.count_slot = 1;
        hdr.netdir.flags[4:1] = marks;
    }

    action get_hit_b(bit<8> addr_reason, bit<1> leaves, bit<4> marks) {
        address_b(addr_reason, leaves);
        NETDIR_COUNT(events, EVENT_HIT);
        meta.count_slot = 1;
        hdr.netdir.flags[4:1] = marks;
    }

    action get_miss_a(bit<8> addr_reason, bit<1> leaves) {
        address_a(addr_reason, leaves);
        NETDIR_COUNT(events, EVENT_MISS);
        meta.count_sketch = 1;
        hdr.netdir.flags[4:1] = MARKS_NONE;
    }

    action get_miss_b(bit<8> addr_reason, bit<1> leaves) {
        address_b(addr_reason, leaves);
        NETDIR_COUNT(events, EVENT_MISS);
        meta.count_sketch = 1;
        hdr.netdir.flags[4:1] = MARKS_NONE;
    }

    // A write's target is its head, candidate a (the candidates table).
    action write_hit(bit<8> addr_reason, bit<1> leaves) {
        address_a(addr_reason, leaves);
        NETDIR_COUNT(events, EVENT_HIT);
        meta.count_slot = 1;
        hdr.netdir.stamp = meta.coh_version;
        hdr.netdir.flags[4:1] = MARKS_STAMPED_HIT;
    }

    action write_miss(bit<8> addr_reason, bit<1> leaves) {
        address_a(addr_reason, leaves);
        NETDIR_COUNT(events, EVENT_MISS);
        meta.count_sketch = 1;
        hdr.netdir.stamp = 0; // only a data plane stamps; the head assigns the version
        hdr.netdir.flags[4:1] = MARKS_NONE;
    }

    action to_client() {
        meta.verdict = OUT_TO_CLIENT;
        NETDIR_COUNT(events, EVENT_REPLY);
    }

    action vsb_multicast() {
        meta.verdict = OUT_MULTICAST;
        NETDIR_COUNT(events, EVENT_VSB);
        meta.mcast_grp = VSB_MCAST_GROUP;
    }

    action pass() {
        meta.verdict = OUT_PASS;
        NETDIR_COUNT(events, EVENT_PASS);
    }

    action l2l3() {
        meta.verdict = OUT_L2L3; // not netdir traffic
    }

    action verdict_drop() {
        meta.verdict = OUT_DROP;
    }

    // The keys' candidate taken: a by (PICK_A, _) and (0, 0), b by
    // (PICK_B, _) and (0, 1). A packet with a reason misses.
    @hidden
    table verdict {
        key = {
            meta.reason: ternary;
            meta.op_class: ternary;
            meta.slot_hit: exact;
            meta.score_pick: ternary;
            meta.score_diff[31:31]: ternary @name("score_sign");
            meta.addr_a_known: ternary;
            meta.addr_b_known: ternary;
            meta.sa_fresh: ternary;
            meta.sb_fresh: ternary;
        }
        actions = {
            get_hit_a;
            get_hit_b;
            get_miss_a;
            get_miss_b;
            write_hit;
            write_miss;
            to_client;
            vsb_multicast;
            pass;
            l2l3;
            verdict_drop;
        }
        const default_action = verdict_drop();
        const entries = {
            (REASON_NONE, CLASS_GET, true, PICK_A, _, 1, _, 0, _): get_hit_a(REASON_NONE, 1, MARKS_VERIFY_HIT);
            (REASON_NONE, CLASS_GET, true, PICK_A, _, 1, _, _, _): get_hit_a(REASON_NONE, 1, MARKS_HIT);
            (REASON_NONE, CLASS_GET, true, PICK_A, _, 0, _, 0, _): get_hit_a(REASON_NO_NODE_ADDR, 0, MARKS_VERIFY_HIT);
            (REASON_NONE, CLASS_GET, true, PICK_A, _, 0, _, _, _): get_hit_a(REASON_NO_NODE_ADDR, 0, MARKS_HIT);
            (REASON_NONE, CLASS_GET, true, 0, 0, 1, _, 0, _): get_hit_a(REASON_NONE, 1, MARKS_VERIFY_HIT);
            (REASON_NONE, CLASS_GET, true, 0, 0, 1, _, _, _): get_hit_a(REASON_NONE, 1, MARKS_HIT);
            (REASON_NONE, CLASS_GET, true, 0, 0, 0, _, 0, _): get_hit_a(REASON_NO_NODE_ADDR, 0, MARKS_VERIFY_HIT);
            (REASON_NONE, CLASS_GET, true, 0, 0, 0, _, _, _): get_hit_a(REASON_NO_NODE_ADDR, 0, MARKS_HIT);
            (REASON_NONE, CLASS_GET, true, PICK_B, _, _, 1, _, 0): get_hit_b(REASON_NONE, 1, MARKS_VERIFY_HIT);
            (REASON_NONE, CLASS_GET, true, PICK_B, _, _, 1, _, _): get_hit_b(REASON_NONE, 1, MARKS_HIT);
            (REASON_NONE, CLASS_GET, true, PICK_B, _, _, 0, _, 0): get_hit_b(REASON_NO_NODE_ADDR, 0, MARKS_VERIFY_HIT);
            (REASON_NONE, CLASS_GET, true, PICK_B, _, _, 0, _, _): get_hit_b(REASON_NO_NODE_ADDR, 0, MARKS_HIT);
            (REASON_NONE, CLASS_GET, true, 0, 1, _, 1, _, 0): get_hit_b(REASON_NONE, 1, MARKS_VERIFY_HIT);
            (REASON_NONE, CLASS_GET, true, 0, 1, _, 1, _, _): get_hit_b(REASON_NONE, 1, MARKS_HIT);
            (REASON_NONE, CLASS_GET, true, 0, 1, _, 0, _, 0): get_hit_b(REASON_NO_NODE_ADDR, 0, MARKS_VERIFY_HIT);
            (REASON_NONE, CLASS_GET, true, 0, 1, _, 0, _, _): get_hit_b(REASON_NO_NODE_ADDR, 0, MARKS_HIT);
            (REASON_NONE, CLASS_GET, false, PICK_A, _, 1, _, _, _): get_miss_a(REASON_NONE, 1);
            (REASON_NONE, CLASS_GET, false, PICK_A, _, 0, _, _, _): get_miss_a(REASON_NO_NODE_ADDR, 0);
            (REASON_NONE, CLASS_GET, false, 0, 0, 1, _, _, _): get_miss_a(REASON_NONE, 1);
            (REASON_NONE, CLASS_GET, false, 0, 0, 0, _, _, _): get_miss_a(REASON_NO_NODE_ADDR, 0);
            (REASON_NONE, CLASS_GET, false, PICK_B, _, _, 1, _, _): get_miss_b(REASON_NONE, 1);
            (REASON_NONE, CLASS_GET, false, PICK_B, _, _, 0, _, _): get_miss_b(REASON_NO_NODE_ADDR, 0);
            (REASON_NONE, CLASS_GET, false, 0, 1, _, 1, _, _): get_miss_b(REASON_NONE, 1);
            (REASON_NONE, CLASS_GET, false, 0, 1, _, 0, _, _): get_miss_b(REASON_NO_NODE_ADDR, 0);
            (REASON_NONE, CLASS_WRITE, true, _, _, 1, _, _, _): write_hit(REASON_NONE, 1);
            (REASON_NONE, CLASS_WRITE, true, _, _, 0, _, _, _): write_hit(REASON_NO_NODE_ADDR, 0);
            (REASON_NONE, CLASS_WRITE, false, _, _, 1, _, _, _): write_miss(REASON_NONE, 1);
            (REASON_NONE, CLASS_WRITE, false, _, _, 0, _, _, _): write_miss(REASON_NO_NODE_ADDR, 0);
            (REASON_NONE, CLASS_REPLY, false, _, _, _, _, _, _): to_client();
            (REASON_NONE, CLASS_REPLY, true, _, _, _, _, _, _): to_client();
            (REASON_NONE, CLASS_WREPLY, false, _, _, _, _, _, _): to_client();
            (REASON_NONE, CLASS_WREPLY, true, _, _, _, _, _, _): to_client();
            (REASON_NONE, CLASS_VSB, false, _, _, _, _, _, _): vsb_multicast();
            (REASON_NONE, CLASS_VSB, true, _, _, _, _, _, _): vsb_multicast();
            (REASON_NONE, CLASS_NODE_OP, false, _, _, _, _, _, _): pass();
            (REASON_NONE, CLASS_NODE_OP, true, _, _, _, _, _, _): pass();
            (REASON_NONE, _, false, _, _, _, _, _, _): l2l3();
            (REASON_NONE, _, true, _, _, _, _, _, _): l2l3();
        }
    }

    // The switched count: the score took b (a table of its own: Tofino
    // addresses every counter of a table's actions alike).
    action count_switched() {
        NETDIR_COUNT(switched, 0);
    }

    @hidden
    table switched_count {
        key = {
            meta.reason: ternary;
            meta.op_class: ternary;
            meta.score_pick: ternary;
            meta.score_diff[31:31]: ternary @name("score_sign");
        }
        actions = {
            count_switched;
            NoAction;
        }
        const default_action = NoAction();
        const entries = {
            (REASON_NONE, CLASS_GET, PICK_B, _): count_switched();
            (REASON_NONE, CLASS_GET, 0, 1): count_switched();
        }
    }

    // The drops count, by the reason so far or the verdict's: a target
    // without an address (the index an action parameter, so that every
    // action addresses the counter alike).
    action count_drop(bit<8> index) {
        NETDIR_COUNT(drops, index);
    }

    @hidden
    table drop_count {
        key = {
            meta.reason: ternary;
            meta.op_class: ternary;
            meta.score_pick: ternary;
            meta.score_diff[31:31]: ternary @name("score_sign");
            meta.addr_a_known: ternary;
            meta.addr_b_known: ternary;
        }
        actions = {
            count_drop;
            NoAction;
        }
        const default_action = NoAction();
        const entries = {
            (REASON_SHORT, _, _, _, _, _): count_drop(REASON_SHORT);
            (REASON_MAGIC, _, _, _, _, _): count_drop(REASON_MAGIC);
            (REASON_VERSION, _, _, _, _, _): count_drop(REASON_VERSION);
            (REASON_UNKNOWN_OP, _, _, _, _, _): count_drop(REASON_UNKNOWN_OP);
            (REASON_NO_ROUTE, _, _, _, _, _): count_drop(REASON_NO_ROUTE);
            (REASON_VSB_PORT, _, _, _, _, _): count_drop(REASON_VSB_PORT);
            (REASON_VSB_NOT_CACHED, _, _, _, _, _): count_drop(REASON_VSB_NOT_CACHED);
            (REASON_VSB_NOT_MEMBER, _, _, _, _, _): count_drop(REASON_VSB_NOT_MEMBER);
            (REASON_VSB_PENDING, _, _, _, _, _): count_drop(REASON_VSB_PENDING);
            (REASON_VSB_VERSION, _, _, _, _, _): count_drop(REASON_VSB_VERSION);
            (REASON_NO_NODE_ADDR, _, _, _, _, _): count_drop(REASON_NO_NODE_ADDR);
            (REASON_RESEED_RACE, _, _, _, _, _): count_drop(REASON_RESEED_RACE);
            (REASON_NONE, CLASS_GET, PICK_A, _, 0, _): count_drop(REASON_NO_NODE_ADDR);
            (REASON_NONE, CLASS_GET, 0, 0, 0, _): count_drop(REASON_NO_NODE_ADDR);
            (REASON_NONE, CLASS_GET, PICK_B, _, _, 0): count_drop(REASON_NO_NODE_ADDR);
            (REASON_NONE, CLASS_GET, 0, 1, _, 0): count_drop(REASON_NO_NODE_ADDR);
            (REASON_NONE, CLASS_WRITE, _, _, 0, _): count_drop(REASON_NO_NODE_ADDR);
        }
    }

    apply {
        // meta starts at zero (BMv2 zeroes user metadata per packet; the
        // TNA parser sets it, and @pa_auto_init_metadata): op_class
        // CLASS_OTHER, reason REASON_NONE, coh_cmd COH_NONE, no hits, no
        // target. Assigning those zeros again here would cost Tofino a
        // stage (every later write must follow them).
        // 1. Parse checks and op class (classify).
        if (meta.is_netdir) {
            classify.apply();
        }

        // What is not a directory decision (replies, node ops, other
        // traffic) is forwarded as soon as the class is known: no later
        // step drops it (a write reply's reseed race, TNA, drops it all
        // the same) and nothing else rewrites it, so that on Tofino its
        // tables do not wait for the verdict. A netdir packet of class
        // CLASS_OTHER has a reason (classify sets one or the other); the
        // test spares meta.reason, which later steps write.
        if (meta.op_class == CLASS_REPLY || meta.op_class == CLASS_WREPLY ||
                meta.op_class == CLASS_NODE_OP || !meta.is_netdir) {
            forwarding.apply(hdr, meta);
        }

        // For NetdirTail's dmClock: a request's tenant totals are read
        // whether or not it leaves (no side effect). Set by the class
        // alone, as soon as it is known: on Tofino a table after the
        // verdict shared its bridged container with the top level's flags
        // and took their stage.
        if (meta.op_class == CLASS_GET || meta.op_class == CLASS_WRITE) {
            meta.qos_request = 1;
        }

        // 2. Lookups: directory, partition, VSB admission. They have no
        // side effects, so they run for every packet, whatever its class,
        // in no condition's branch: a lookup that waited for the class
        // would take a stage more on Tofino, and Tofino 1 places all of a
        // placed condition's branch before any other table of its block
        // (so a branch of lookups kept `classify` out of their stages).
        // Only the classes that use a result read it: a packet with no
        // netdir header has class CLASS_OTHER, whose every later step
        // (commands, coherence, the verdict) ignores the lookups.
        directory.apply(hdr, meta);
        partition.apply(hdr, meta);
        split.apply(hdr, meta);
        vsb_filter.apply(hdr, meta, ingress_port);

        // 2b. What a GET or a write may need, read before the coherence
        // state decides (no side effects; on Tofino beside the coherence
        // stages, not after them): the candidates' addresses, stats and
        // fine score. A reply's stats are learnt here too.
        candidates.apply();
        node_addr.apply(meta);
        if (meta.op_class == CLASS_REPLY || meta.op_class == CLASS_WREPLY) {
            if (hdr.netdir.op != OP_ERR && (hdr.netdir.code == CODE_OK || hdr.netdir.code == CODE_NOT_FOUND)) {
                meta.qos_complete = 1;
            }
            // Charge the completion to the node that scheduled the request:
            // a write's chain head, though the tail replies.
            meta.qos_node = hdr.netdir.node;
            if (meta.op_class == CLASS_WREPLY && meta.part_hit) {
                meta.qos_node = meta.part_head;
            }
        }
        // A reply learns, a GET reads: tested on the class itself, which
        // on Tofino is known a stage before any flag set from it.
        node_stats.apply(hdr, meta, meta.op_class == CLASS_REPLY || meta.op_class == CLASS_WREPLY);
        fine_score.apply(meta);

        // 3. What the coherence state must do, and the drops decided so far:
        // one constant table (on Tofino one logical table, not a gateway
        // and an assignment per case).
        commands.apply();
        // Applied to every packet, not in a condition's branch: Tofino 1
        // places everything a placed condition guards before any other
        // table of the sequence around it, so the GET path (candidates,
        // node stats, fine score) waited for the whole coherence chain.
        // Each Coherence admits only what may touch the slot's state: a
        // command (v1model), or any hit of a GET, PUT/DEL, write reply or
        // VSB, whatever its command (TNA, whose slot's gen is checked as
        // soon as the hit is known: gen_op's key, p4/tna/coherence.p4).
        coherence.apply(hdr, meta);
        if (meta.resubmit) {
            // TNA: the first pass of a slot's re-seed (p4/tna/coherence.p4).
            // The packet comes back unchanged; it is counted and sent then.
            return;
        }

        // 4. The verdict and the target's address (the verdict table: a
        // request is sent to its node; the rest went after section 1), and
        // 5. the counts (events in the verdict's actions, the hot keys in
        // NetdirTail). Coherence writes its reason (a refused VSB, TNA's
        // reseed race) into meta.reason itself, over the commands' one (a
        // merge of a separate field would cost Tofino a stage). The fresh
        // masks are side-effect free: read for every packet, before the
        // verdict. The counts read the reason before the verdict's.
        candidates_fresh.apply(meta);
        switched_count.apply();
        drop_count.apply();
        verdict.apply();
    }
}

// NetdirTail: dmClock (qos.p4) stamps δ and ρ on a request that leaves for
// its node (not one dropped for want of the node's address) or counts a
// completion; the hot-key counters count a slot's hits and the sketch's
// misses. Neither decides where the packet goes, so on Tofino they run in
// egress (p4/tna/netdir.p4); every input is a header field or meta.slot,
// meta.target, meta.qos_node and NetdirPipe's flags.
control NetdirTail(inout headers_t hdr, inout local_meta_t meta) {
    HotKeys() hot_keys;
    Qos() qos;

    apply {
        qos.apply(hdr, meta, meta.qos_request == 1, meta.qos_stamp == 1, meta.qos_complete == 1);
        hot_keys.apply(hdr, meta, meta.count_slot == 1, meta.count_sketch == 1);
    }
}

#endif
