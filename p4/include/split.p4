// netdir: weighted splits by bucket tables, never by action-selector weights
// (BMv2's PI fakes them and Stratum refuses them).
//
// SlotSplit: each directory slot has a bucket table of 32 entries, each an
// index into the slot's LocationList. The controller realises the table as
// one entry per run of equal buckets (directory.Runs): (slot, bucket range)
// -> (LocationList index, node). directory.BucketsForWeights gives each
// member one contiguous run, so a slot costs one entry per member with a
// share, not 32. Runs never overlap (all entries have priority 1). Candidate
// a takes bucket reqid & 31, candidate b bucket (reqid >> 8) & 31.
// slot_buckets_a and slot_buckets_b hold the same entries (one apply per
// table per packet). The candidates' fresh bits
// (1 << index) come from constant tables: Tofino cannot shift by a run-time
// amount.
//
// ChainFallback: when neither candidate is fresh, the GET goes to the chain,
// which may always serve (CRAQ): index (partition bucket a) mod R of the
// slot, as directory.get does, through the slot's chain table (slot, index)
// -> node. P4 has no modulo: a constant table gives index mod R.
#ifndef NETDIR_SPLIT_P4
#define NETDIR_SPLIT_P4

#include "headers.p4"

control SlotSplit(in headers_t hdr, inout local_meta_t meta) {
    action set_loc_a(loc_t index, node_t node) {
        meta.sa_idx = index;
        meta.sa_node = node;
    }

    action head_a() {
        meta.sa_idx = 0;
        meta.sa_node = meta.slot_head;
    }

    table slot_buckets_a {
        key = {
            meta.slot: exact @name("slot");
            hdr.netdir.reqid[4:0]: range @name("bucket");
        }
        actions = {
            set_loc_a;
            @defaultonly head_a;
        }
        const default_action = head_a();
        size = NETDIR_SLOT_BUCKETS;
    }

    action set_loc_b(loc_t index, node_t node) {
        meta.sb_idx = index;
        meta.sb_node = node;
    }

    action head_b() {
        meta.sb_idx = 0;
        meta.sb_node = meta.slot_head;
    }

    table slot_buckets_b {
        key = {
            meta.slot: exact @name("slot");
            hdr.netdir.reqid[12:8]: range @name("bucket");
        }
        actions = {
            set_loc_b;
            @defaultonly head_b;
        }
        const default_action = head_b();
        size = NETDIR_SLOT_BUCKETS;
    }

    action set_bit_a(bit<32> b) {
        meta.sa_bit = b;
    }

    @hidden
    table loc_bits_a {
        key = {
            meta.sa_idx: exact;
        }
        actions = {
            set_bit_a;
        }
        const default_action = set_bit_a(0);
        const entries = {
            0: set_bit_a(32w0x1);
            1: set_bit_a(32w0x2);
            2: set_bit_a(32w0x4);
            3: set_bit_a(32w0x8);
            4: set_bit_a(32w0x10);
            5: set_bit_a(32w0x20);
            6: set_bit_a(32w0x40);
            7: set_bit_a(32w0x80);
            8: set_bit_a(32w0x100);
            9: set_bit_a(32w0x200);
            10: set_bit_a(32w0x400);
            11: set_bit_a(32w0x800);
            12: set_bit_a(32w0x1000);
            13: set_bit_a(32w0x2000);
            14: set_bit_a(32w0x4000);
            15: set_bit_a(32w0x8000);
            16: set_bit_a(32w0x10000);
            17: set_bit_a(32w0x20000);
            18: set_bit_a(32w0x40000);
            19: set_bit_a(32w0x80000);
            20: set_bit_a(32w0x100000);
            21: set_bit_a(32w0x200000);
            22: set_bit_a(32w0x400000);
            23: set_bit_a(32w0x800000);
            24: set_bit_a(32w0x1000000);
            25: set_bit_a(32w0x2000000);
            26: set_bit_a(32w0x4000000);
            27: set_bit_a(32w0x8000000);
            28: set_bit_a(32w0x10000000);
            29: set_bit_a(32w0x20000000);
            30: set_bit_a(32w0x40000000);
            31: set_bit_a(32w0x80000000);
        }
    }

    action set_bit_b(bit<32> b) {
        meta.sb_bit = b;
    }

    @hidden
    table loc_bits_b {
        key = {
            meta.sb_idx: exact;
        }
        actions = {
            set_bit_b;
        }
        const default_action = set_bit_b(0);
        const entries = {
            0: set_bit_b(32w0x1);
            1: set_bit_b(32w0x2);
            2: set_bit_b(32w0x4);
            3: set_bit_b(32w0x8);
            4: set_bit_b(32w0x10);
            5: set_bit_b(32w0x20);
            6: set_bit_b(32w0x40);
            7: set_bit_b(32w0x80);
            8: set_bit_b(32w0x100);
            9: set_bit_b(32w0x200);
            10: set_bit_b(32w0x400);
            11: set_bit_b(32w0x800);
            12: set_bit_b(32w0x1000);
            13: set_bit_b(32w0x2000);
            14: set_bit_b(32w0x4000);
            15: set_bit_b(32w0x8000);
            16: set_bit_b(32w0x10000);
            17: set_bit_b(32w0x20000);
            18: set_bit_b(32w0x40000);
            19: set_bit_b(32w0x80000);
            20: set_bit_b(32w0x100000);
            21: set_bit_b(32w0x200000);
            22: set_bit_b(32w0x400000);
            23: set_bit_b(32w0x800000);
            24: set_bit_b(32w0x1000000);
            25: set_bit_b(32w0x2000000);
            26: set_bit_b(32w0x4000000);
            27: set_bit_b(32w0x8000000);
            28: set_bit_b(32w0x10000000);
            29: set_bit_b(32w0x20000000);
            30: set_bit_b(32w0x40000000);
            31: set_bit_b(32w0x80000000);
        }
    }

    apply {
        slot_buckets_a.apply();
        slot_buckets_b.apply();
        loc_bits_a.apply();
        loc_bits_b.apply();
    }
}

// CandidateStale: whether the candidate the fine score took is an extra
// whose fresh bit is clear (rule of issue 18: it serves the read only after
// asking the tail, FlagVerify). The chain's bits are always set in fresh
// (a promotion, a stamp and a completion all set fresh = the chain), so the
// clear bit alone names a non-fresh extra. Masked in a table's action so
// that the condition that follows tests a plain field (a Tofino gateway
// cannot AND two run-time values, and the compiler would fold a plain
// assignment back into the condition).
control CandidateStale(inout local_meta_t meta) {
    action mask_stale() {
        meta.pick_stale = meta.pick_bit & ~meta.fresh;
    }

    @hidden
    table candidate_stale {
        actions = {
            mask_stale;
        }
        const default_action = mask_stale();
    }

    apply {
        candidate_stale.apply();
    }
}

control ChainFallback(in headers_t hdr, inout local_meta_t meta) {
    action set_fallback_index(chain_idx_t index) {
        meta.fallback_idx = index;
    }

    @hidden
    table chain_mod {
        key = {
            meta.pa_idx: exact;
            meta.slot_r: exact;
        }
        actions = {
            set_fallback_index;
        }
        const default_action = set_fallback_index(0);
        const entries = {
            (0, 1): set_fallback_index(0);
            (0, 2): set_fallback_index(0);
            (0, 3): set_fallback_index(0);
            (0, 4): set_fallback_index(0);
            (0, 5): set_fallback_index(0);
            (0, 6): set_fallback_index(0);
            (0, 7): set_fallback_index(0);
            (0, 8): set_fallback_index(0);
            (1, 1): set_fallback_index(0);
            (1, 2): set_fallback_index(1);
            (1, 3): set_fallback_index(1);
            (1, 4): set_fallback_index(1);
            (1, 5): set_fallback_index(1);
            (1, 6): set_fallback_index(1);
            (1, 7): set_fallback_index(1);
            (1, 8): set_fallback_index(1);
            (2, 1): set_fallback_index(0);
            (2, 2): set_fallback_index(0);
            (2, 3): set_fallback_index(2);
            (2, 4): set_fallback_index(2);
            (2, 5): set_fallback_index(2);
            (2, 6): set_fallback_index(2);
            (2, 7): set_fallback_index(2);
            (2, 8): set_fallback_index(2);
            (3, 1): set_fallback_index(0);
            (3, 2): set_fallback_index(1);
            (3, 3): set_fallback_index(0);
            (3, 4): set_fallback_index(3);
            (3, 5): set_fallback_index(3);
            (3, 6): set_fallback_index(3);
            (3, 7): set_fallback_index(3);
            (3, 8): set_fallback_index(3);
            (4, 1): set_fallback_index(0);
            (4, 2): set_fallback_index(0);
            (4, 3): set_fallback_index(1);
            (4, 4): set_fallback_index(0);
            (4, 5): set_fallback_index(4);
            (4, 6): set_fallback_index(4);
            (4, 7): set_fallback_index(4);
            (4, 8): set_fallback_index(4);
            (5, 1): set_fallback_index(0);
            (5, 2): set_fallback_index(1);
            (5, 3): set_fallback_index(2);
            (5, 4): set_fallback_index(1);
            (5, 5): set_fallback_index(0);
            (5, 6): set_fallback_index(5);
            (5, 7): set_fallback_index(5);
            (5, 8): set_fallback_index(5);
            (6, 1): set_fallback_index(0);
            (6, 2): set_fallback_index(0);
            (6, 3): set_fallback_index(0);
            (6, 4): set_fallback_index(2);
            (6, 5): set_fallback_index(1);
            (6, 6): set_fallback_index(0);
            (6, 7): set_fallback_index(6);
            (6, 8): set_fallback_index(6);
            (7, 1): set_fallback_index(0);
            (7, 2): set_fallback_index(1);
            (7, 3): set_fallback_index(1);
            (7, 4): set_fallback_index(3);
            (7, 5): set_fallback_index(2);
            (7, 6): set_fallback_index(1);
            (7, 7): set_fallback_index(0);
            (7, 8): set_fallback_index(7);
        }
    }

    action set_fallback_node(node_t node) {
        meta.target = node;
    }

    action fallback_head() {
        meta.target = meta.slot_head;
    }

    table slot_chain {
        key = {
            meta.slot: exact @name("slot");
            meta.fallback_idx: exact @name("index");
        }
        actions = {
            set_fallback_node;
            @defaultonly fallback_head;
        }
        const default_action = fallback_head();
        size = NETDIR_SLOT_CHAIN;
    }

    apply {
        chain_mod.apply();
        slot_chain.apply();
    }
}

#endif
