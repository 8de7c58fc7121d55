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
// table per packet). The candidates' bits in the fresh bitmap (1 << index)
// come from constant tables: Tofino cannot shift by a run-time amount.
// Either candidate may serve, fresh or not (issue 18): the netdir policy
// always has one, so a hit never falls back to the partition's chain.
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

// CandidatesFresh: each candidate's fresh bit, masked in a table's action so
// that the conditions that follow test plain fields (a Tofino gateway cannot
// AND two run-time values, and the compiler would fold a plain assignment
// back into the condition). A clear bit names a non-fresh extra: the chain's
// bits are always set (a promotion, a stamp and a completion all set fresh =
// the chain), so the candidate serves only what the tail confirms (issue 18,
// FlagVerify).
control CandidatesFresh(inout local_meta_t meta) {
    action mask_fresh() {
        meta.sa_fresh = meta.fresh & meta.sa_bit;
        meta.sb_fresh = meta.fresh & meta.sb_bit;
    }

    @hidden
    table candidates_fresh {
        actions = {
            mask_fresh;
        }
        const default_action = mask_fresh();
    }

    apply {
        candidates_fresh.apply();
    }
}

#endif
