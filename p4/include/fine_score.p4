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
    // field (the compiler would fold an assignment into it).
    action compare_scores() {
        meta.score_diff = meta.quota_a - meta.quota_b;
    }

    @hidden
    table compare {
        actions = {
            compare_scores;
        }
        const default_action = compare_scores();
    }

    apply {
        score_a.apply();
        score_b.apply();
        compare.apply();
        // An unlearnt latency is 0, and so is its key (a latency past 32
        // bits keys as 0xffffffff). Tested here, beside the score tables,
        // so that FinePick's conditions wait for the difference alone.
        if (meta.lat_a_key == 0) {
            meta.a_unlearnt = true;
        } else {
            meta.a_unlearnt = false;
        }
        if (meta.lat_b_key == 0) {
            meta.b_unlearnt = true;
        } else {
            meta.b_unlearnt = false;
        }
    }
}

// FinePick: the target by the fine score (FineScore, applied before), as
// directory.finer: an unlearnt a first, then an unlearnt b, then the larger
// score, ties to a. switched: b was picked. For a directory hit (hit, a
// constant at each call, folded away; bit<1> because p4c 1.2.4.8 fails on a
// bool literal argument here) it also writes the marks: hit, and verify when
// the candidate taken is not fresh (CandidatesFresh; issue 18), in the branch
// that takes it, so that on Tofino they wait for nothing the target does not.
control FinePick(inout headers_t hdr, inout local_meta_t meta, inout bool switched, in bit<1> hit) {
    apply {
        if (!meta.a_unlearnt && (meta.b_unlearnt || meta.score_diff[31:31] == 1)) {
            meta.target = meta.cand_b;
            switched = true;
            if (hit == 1) {
                if (meta.sb_fresh != 0) {
                    hdr.netdir.flags[4:1] = MARKS_HIT;
                } else {
                    hdr.netdir.flags[4:1] = MARKS_VERIFY_HIT;
                }
            }
        } else {
            meta.target = meta.cand_a;
            if (hit == 1) {
                if (meta.sa_fresh != 0) {
                    hdr.netdir.flags[4:1] = MARKS_HIT;
                } else {
                    hdr.netdir.flags[4:1] = MARKS_VERIFY_HIT;
                }
            }
        }
    }
}

#endif
