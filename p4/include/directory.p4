// netdir: the directory, hot keys only (Pegasus). An exact match on the
// 128-bit KeyHash gives the key's slot, its LocationList length N, its chain
// length R, its chain head, and the promotion's generation and seed version. The rest of the slot lives in the tables of
// split.p4 (bucket tables, chain), vsb_filter.p4 (members) and the registers
// of coherence.p4 (ver_next, ver_done, fresh), all indexed by the slot.
#ifndef NETDIR_DIRECTORY_P4
#define NETDIR_DIRECTORY_P4

#include "headers.p4"

control Directory(in headers_t hdr, inout local_meta_t meta) {
    // gen: the promotion's generation, nonzero and different from the slot's
    // previous key's (a controller's insert counter); ver: the seed stamp
    // (wire.MakeStamp): its low 48 bits are the version that seeds ver_next
    // and ver_done, its top 16 the incarnation that Coherence stamps above
    // every version (spec/README.md, flaw G). The slot's registers still hold the
    // previous key's state, and P4Runtime cannot write registers, so
    // Coherence re-seeds them on the first packet that finds a new gen
    // (ver_next = ver_done = ver, fresh = the chain).
    action hit(slot_t slot, loc_len_t n, chain_len_t r, node_t head, bit<32> gen, version_t ver) {
        meta.slot_hit = true;
        meta.slot = slot;
        meta.slot_n = n;
        meta.slot_r = r;
        meta.slot_head = head;
        meta.slot_gen = gen;
        meta.slot_ver = ver;
    }

    action miss() {
        meta.slot_hit = false;
    }

    table slots {
        key = {
            hdr.netdir.keyhash: exact @name("keyhash");
        }
        actions = {
            hit;
            @defaultonly miss;
        }
        const default_action = miss();
        size = NETDIR_SLOTS;
    }

    // The chain's fresh bits, (1 << R) - 1, by lookup: Tofino has no shift by
    // a run-time amount.
    action set_chain_mask(bit<32> mask) {
        meta.chain_mask = mask;
    }

    @hidden
    table chain_masks {
        key = {
            meta.slot_r: exact;
        }
        actions = {
            set_chain_mask;
        }
        const default_action = set_chain_mask(0);
        const entries = {
            1: set_chain_mask(0x01);
            2: set_chain_mask(0x03);
            3: set_chain_mask(0x07);
            4: set_chain_mask(0x0f);
            5: set_chain_mask(0x1f);
            6: set_chain_mask(0x3f);
            7: set_chain_mask(0x7f);
            8: set_chain_mask(0xff);
        }
    }

    // chain_masks in no hit branch: on Tofino 1 a placed table's branch
    // must be placed before anything after it in its block (the other
    // lookups). A miss has R = 0 and mask 0, and only a hit reads it.
    apply {
        slots.apply();
        chain_masks.apply();
    }
}

#endif
