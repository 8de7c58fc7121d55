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

    apply {
        if (learn) {
            if (hdr.netdir.node < NETDIR_MAX_NODES) {
                load_a_write.execute(hdr.netdir.node);
                load_b_write.execute(hdr.netdir.node);
                sample.apply();
                // ts != 0 (as the OR of its halves: a condition reads 4 bytes).
                if (meta.ts_set != 0 && meta.sample32[31:31] == 0) {
                    meta.lat_new = latency_lpf.execute(meta.sample32, hdr.netdir.node);
                    lat_a_write.execute(hdr.netdir.node);
                    lat_b_write.execute(hdr.netdir.node);
                }
            }
        } else {
            // The fine score's keys directly: a 32-bit latency is its own key.
            meta.lat_a_key = lat_a_read.execute(meta.cand_a);
            meta.lat_b_key = lat_b_read.execute(meta.cand_b);
            meta.load_a = load_a_read.execute(meta.cand_a);
            meta.load_b = load_b_read.execute(meta.cand_b);
        }
    }
}

#endif
