// netdir: the fine score (HATS section 4.3). Of two weighted-random
// candidates take the one that can finish more requests in the window:
// score = Window / t - load, t the node's latency EWMA. A node whose latency is
// not yet learnt (t = 0) scores highest, so that it gets probed; ties keep
// candidate a. Exactly directory.finer.
//
// P4 has no division. Window / t is realised exactly by a range table on t:
// floor(W / t) takes about 2 * sqrt(W) distinct values, each on one range of
// t, so the controller installs one entry per range (about 2000 for the
// default W = 1 ms; size NETDIR_SCORE_ENTRIES covers W up to about 4 ms).
// t >= 2^32 or beyond W misses and scores Window / t = 0, as the Go core does.
// score_a and score_b hold the same entries (one apply per table per packet).
//
// score_a >= score_b  <=>  quota_a + load_b >= quota_b + load_a, in 32 bits:
// quota <= W < 2^31 and load < 2^16 cannot overflow.
#ifndef NETDIR_FINE_SCORE_P4
#define NETDIR_FINE_SCORE_P4

#include "headers.p4"

control FineScore(inout local_meta_t meta) {
    action set_quota_a(bit<32> quota) {
        meta.quota_a = quota;
    }

    table score_a {
        key = {
            meta.lat_a_key: range @name("latency");
        }
        actions = {
            set_quota_a;
        }
        const default_action = set_quota_a(0);
        size = NETDIR_SCORE_ENTRIES;
    }

    action set_quota_b(bit<32> quota) {
        meta.quota_b = quota;
    }

    table score_b {
        key = {
            meta.lat_b_key: range @name("latency");
        }
        actions = {
            set_quota_b;
        }
        const default_action = set_quota_b(0);
        size = NETDIR_SCORE_ENTRIES;
    }

    apply {
        meta.lat_a_key = 0xffffffff;
        if (meta.lat_a[63:32] == 0) {
            meta.lat_a_key = meta.lat_a[31:0];
        }
        meta.lat_b_key = 0xffffffff;
        if (meta.lat_b[63:32] == 0) {
            meta.lat_b_key = meta.lat_b[31:0];
        }
        score_a.apply();
        score_b.apply();
        if (meta.lat_a == 0) {
            meta.pick_b = false;
        } else if (meta.lat_b == 0) {
            meta.pick_b = true;
        } else {
            meta.pick_b = meta.quota_a + (bit<32>)meta.load_b < meta.quota_b + (bit<32>)meta.load_a;
        }
    }
}

#endif
