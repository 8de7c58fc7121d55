// netdir: the fine score (HATS section 4.3). Of two weighted-random
// candidates take the one that can finish more requests in the window:
// score = Window / t - load, t the node's latency EWMA. A node whose latency is
// not yet learnt (t = 0) scores highest, so that it gets probed; ties keep
// candidate a. Exactly directory.finer; the pick itself is in the verdict
// table (pipeline.p4), keyed by score_pick and this difference.
//
// P4 has no division. Window / t is realised exactly by a range table on t:
// floor(W / t) takes about 2 * sqrt(W) distinct values, each on one range of
// t, so the controller installs one entry per range (about 2000 for the
// default W = 1 ms; size NETDIR_SCORE_ENTRIES covers W up to about 4 ms).
// t >= 2^32 or beyond W misses and scores Window / t = 0, as the Go core does.
// score_a and score_b hold the same entries (one apply per table per packet).
//
// score_a >= score_b  <=>  quota_a + load_b >= quota_b + load_a, in 32 bits:
// quota <= W < 2^30 and load < 2^16 cannot overflow. Each table's action adds
// the other candidate's load to its quota, and the comparison is the sign of
// the difference (both sides are below 2^31), so that no condition compares
// two run-time values (Tofino's gateways cannot).
#ifndef NETDIR_FINE_SCORE_P4
#define NETDIR_FINE_SCORE_P4

#include "headers.p4"

control FineScore(inout local_meta_t meta) {
    action set_quota_a(bit<32> quota) {
        meta.quota_a = quota + meta.load_b;
    }

    table score_a {
        key = {
            NETDIR_SCORE_KEY(meta.lat_a_key): range @name("latency");
        }
        actions = {
            set_quota_a;
        }
        const default_action = set_quota_a(0);
        size = NETDIR_SCORE_ENTRIES;
    }

    action set_quota_b(bit<32> quota) {
        meta.quota_b = quota + meta.load_a;
    }

    table score_b {
        key = {
            NETDIR_SCORE_KEY(meta.lat_b_key): range @name("latency");
        }
        actions = {
            set_quota_b;
        }
        const default_action = set_quota_b(0);
        size = NETDIR_SCORE_ENTRIES;
    }

    // The difference in a table's action, so that the condition tests a
    // field (the compiler would fold an assignment into it). An unlearnt
    // latency is 0, and so is its key: then the pick needs no difference
    // (score_pick: PICK_A, an unlearnt a; PICK_B, an unlearnt b and a
    // learnt a; 0, by the difference's sign).
    action compare_scores() {
        meta.score_diff = meta.quota_a - meta.quota_b;
    }

    action a_unlearnt() {
        meta.score_pick = PICK_A;
    }

    action b_unlearnt() {
        meta.score_pick = PICK_B;
    }

    @hidden
    table compare {
        key = {
            NETDIR_SCORE_KEY(meta.lat_a_key): ternary @name("lat_a_key");
            NETDIR_SCORE_KEY(meta.lat_b_key): ternary @name("lat_b_key");
        }
        actions = {
            compare_scores;
            a_unlearnt;
            b_unlearnt;
        }
        const default_action = compare_scores();
        const entries = {
            (0, _): a_unlearnt();
            (_, 0): b_unlearnt();
        }
    }

    apply {
        score_a.apply();
        score_b.apply();
        compare.apply();
    }
}

#endif
