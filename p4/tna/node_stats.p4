// netdir: per-node load and latency for the fine score on Tofino (TNA).
//
// Tofino accesses a register once per packet, and a GET reads two candidates,
// so each value is kept twice (latency_a/latency_b, load_a/load_b): a reply
// writes both copies, a GET reads candidate a from the first and b from the
// second. The loads are 32 bits wide: a read lands in the fine score's
// 32-bit field with no cast (its copy cost a stage), and a reply's load is
// zero-extended in the stateful ALU, not by a table before it (a write that
// waits for a table can be placed before the read's inputs exist, which
// left p4c-barefoot's placement stuck). Tofino's stateful ALU has no
// shift, so the latency EWMA is the Lpf
// extern (a per-node low-pass filter in sample mode; the controller sets its
// time constant to the contract's weight 0.5); its output is clamped to >= 1
// and stored in both copies. This approximates v1model's exact
// (old + sample) >> 1 (p4/include/node_stats.p4); the vector suite holds the
// exact form on BMv2 only. Times are the low 32 bits of ns timestamps: a
// sample is taken when ts != 0 and 0 <= now - ts < 2^31 (about 2.1 s). A
// GET reads a candidate's latency clamped to NETDIR_SCORE_KEY_MAX, the
// fine score's key range (p4/tna/arch.p4).
#ifndef NETDIR_TNA_NODE_STATS_P4
#define NETDIR_TNA_NODE_STATS_P4

control NodeStats(in headers_t hdr, inout local_meta_t meta, in bool learn) {
    Lpf<bit<32>, bit<16>>(NETDIR_MAX_NODES) latency_lpf;
    Register<bit<32>, bit<16>>(NETDIR_MAX_NODES, 0) latency_a;
    Register<bit<32>, bit<16>>(NETDIR_MAX_NODES, 0) latency_b;
    Register<bit<32>, bit<16>>(NETDIR_MAX_NODES, 0) load_a;
    Register<bit<32>, bit<16>>(NETDIR_MAX_NODES, 0) load_b;

    // The written latency is at least 1 (0 means unlearnt), clamped here
    // rather than by a condition of its own (a stage).
    RegisterAction<bit<32>, bit<16>, bit<32>>(latency_a) lat_a_write = {
        void apply(inout bit<32> value) {
            if (meta.lat_new == 0) {
                value = 1;
            } else {
                value = meta.lat_new;
            }
        }
    };
    RegisterAction<bit<32>, bit<16>, bit<32>>(latency_a) lat_a_read = {
        void apply(inout bit<32> value, out bit<32> rv) {
            if (value > NETDIR_SCORE_KEY_MAX) {
                rv = NETDIR_SCORE_KEY_MAX;
            } else {
                rv = value;
            }
        }
    };
    RegisterAction<bit<32>, bit<16>, bit<32>>(latency_b) lat_b_write = {
        void apply(inout bit<32> value) {
            if (meta.lat_new == 0) {
                value = 1;
            } else {
                value = meta.lat_new;
            }
        }
    };
    RegisterAction<bit<32>, bit<16>, bit<32>>(latency_b) lat_b_read = {
        void apply(inout bit<32> value, out bit<32> rv) {
            if (value > NETDIR_SCORE_KEY_MAX) {
                rv = NETDIR_SCORE_KEY_MAX;
            } else {
                rv = value;
            }
        }
    };
    RegisterAction<bit<32>, bit<16>, bit<32>>(load_a) load_a_write = {
        void apply(inout bit<32> value) {
            value = (bit<32>)hdr.netdir.load;
        }
    };
    RegisterAction<bit<32>, bit<16>, bit<32>>(load_a) load_a_read = {
        void apply(inout bit<32> value, out bit<32> rv) {
            rv = value;
        }
    };
    RegisterAction<bit<32>, bit<16>, bit<32>>(load_b) load_b_write = {
        void apply(inout bit<32> value) {
            value = (bit<32>)hdr.netdir.load;
        }
    };
    RegisterAction<bit<32>, bit<16>, bit<32>>(load_b) load_b_read = {
        void apply(inout bit<32> value, out bit<32> rv) {
            rv = value;
        }
    };

    // The sample in a table's action, so that it reaches the Lpf as a field
    // (the compiler would fold an assignment into the Lpf's input).
    action take_sample() {
        meta.sample32 = meta.now[31:0] - hdr.netdir.timestamp[31:0];
        meta.ts_set = hdr.netdir.timestamp[63:32] | hdr.netdir.timestamp[31:0];
    }

    @hidden
    table sample {
        actions = {
            take_sample;
        }
        const default_action = take_sample();
    }

    // One table per register, as coherence's (p4/tna/coherence.p4): its
    // constant entries pick the RegisterAction, so that no register's
    // access waits in a condition's branch (placed only after the
    // coherence chain) and each register's one table takes one stage. A
    // reply of a node below NETDIR_MAX_NODES writes (the pipeline sets
    // both candidates to its node), anything else reads (only a GET uses
    // what it reads); no default action executes a RegisterAction.
    action lat_a_learn() {
        lat_a_write.execute(meta.cand_a);
    }
    action lat_a_get() {
        meta.lat_a_key = lat_a_read.execute(meta.cand_a); // a 32-bit latency is its own key
    }
    action lat_b_learn() {
        lat_b_write.execute(meta.cand_b);
    }
    action lat_b_get() {
        meta.lat_b_key = lat_b_read.execute(meta.cand_b);
    }
    action load_a_learn() {
        load_a_write.execute(meta.cand_a);
    }
    action load_a_get() {
        meta.load_a = load_a_read.execute(meta.cand_a);
    }
    action load_b_learn() {
        load_b_write.execute(meta.cand_b);
    }
    action load_b_get() {
        meta.load_b = load_b_read.execute(meta.cand_b);
    }

// The entries of a node-stats register's table: learn on a reply of a
// node below 4096 (NETDIR_MAX_NODES) whose condition holds, nothing on
// another reply, get otherwise.
#define NETDIR_STATS_ENTRIES(learn_action, get_action) \
        const entries = { \
            (CLASS_REPLY, 0, 1): learn_action(); \
            (CLASS_WREPLY, 0, 1): learn_action(); \
            (CLASS_REPLY, _, _): NoAction(); \
            (CLASS_WREPLY, _, _): NoAction(); \
            (_, _, _): get_action(); \
        }

    @hidden
    table latency_a_op {
        key = {
            meta.op_class: ternary;
            hdr.netdir.node[15:12]: ternary @name("node_high");
            meta.sample_ok: ternary;
        }
        actions = {
            lat_a_learn;
            lat_a_get;
            NoAction;
        }
        const default_action = NoAction();
        NETDIR_STATS_ENTRIES(lat_a_learn, lat_a_get)
    }

    @hidden
    table latency_b_op {
        key = {
            meta.op_class: ternary;
            hdr.netdir.node[15:12]: ternary @name("node_high");
            meta.sample_ok: ternary;
        }
        actions = {
            lat_b_learn;
            lat_b_get;
            NoAction;
        }
        const default_action = NoAction();
        NETDIR_STATS_ENTRIES(lat_b_learn, lat_b_get)
    }

    // A load is learnt whatever the sample: the key's third field is 1.
    bit<1> always = 1;

    @hidden
    table load_a_op {
        key = {
            meta.op_class: ternary;
            hdr.netdir.node[15:12]: ternary @name("node_high");
            always: ternary;
        }
        actions = {
            load_a_learn;
            load_a_get;
            NoAction;
        }
        const default_action = NoAction();
        NETDIR_STATS_ENTRIES(load_a_learn, load_a_get)
    }

    @hidden
    table load_b_op {
        key = {
            meta.op_class: ternary;
            hdr.netdir.node[15:12]: ternary @name("node_high");
            always: ternary;
        }
        actions = {
            load_b_learn;
            load_b_get;
            NoAction;
        }
        const default_action = NoAction();
        NETDIR_STATS_ENTRIES(load_b_learn, load_b_get)
    }

    // A reply's latency sample, taken when ts != 0 (the OR of its halves)
    // and 0 <= now - ts < 2^31, for a node below NETDIR_MAX_NODES: the Lpf
    // moves and sample_ok lets the latency tables write. A table too, not
    // a condition, for the same reason.
    action take_latency() {
        meta.sample_ok = 1;
        meta.lat_new = latency_lpf.execute(meta.sample32, hdr.netdir.node);
    }

    @hidden
    table latency_sample {
        key = {
            meta.op_class: ternary;
            hdr.netdir.node[15:12]: ternary @name("node_high");
            meta.ts_set: ternary;
            meta.sample32[31:31]: ternary @name("sample_sign");
        }
        actions = {
            take_latency;
            NoAction;
        }
        const default_action = NoAction();
        const entries = {
            (CLASS_REPLY, 0, 0, _): NoAction();
            (CLASS_WREPLY, 0, 0, _): NoAction();
            (CLASS_REPLY, 0, _, 0): take_latency();
            (CLASS_WREPLY, 0, _, 0): take_latency();
        }
    }

    apply {
        // Every packet: the sample is only used by a reply's tables.
        sample.apply();
        latency_sample.apply();
        latency_a_op.apply();
        latency_b_op.apply();
        load_a_op.apply();
        load_b_op.apply();
    }
}

#endif
