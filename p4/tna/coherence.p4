// netdir: coherence state per directory slot for Tofino (TNA), the same
// contract as p4/include/coherence.p4 written with RegisterActions: each
// register is touched by exactly one RegisterAction per packet, in the order
// gen -> ver_done -> ver_next -> fresh.
//
// Tofino's stateful ALUs are 32 bits wide: ver_next and ver_done keep the low
// 32 bits of the VersionStamp (a key wraps after 2^32 stamped writes; the
// header carries the value zero-extended to 64 bits). A VSB whose stamp has
// high bits set never matches ver_done.
//
// Promotion: the directory entry's gen and seed version. gen_check replaces
// the slot's gen and reports whether it changed (meta.reinit); every later
// action then has a variant that starts from the seed instead of the stored
// value (directory.Insert: ver_next = ver_done = seed, fresh = the chain).
//
// complete(v): ver_done = v if v > ver_done (reporting whether it moved);
// ver_next = max(ver_next, v) unconditionally, which is the same thing since
// ver_next >= ver_done always holds; fresh = chain only if ver_done moved.
#ifndef NETDIR_TNA_COHERENCE_P4
#define NETDIR_TNA_COHERENCE_P4

control Coherence(in headers_t hdr, inout local_meta_t meta) {
    Register<bit<32>, slot_t>(NETDIR_SLOTS, 0) gen;
    Register<bit<32>, slot_t>(NETDIR_SLOTS, 0) ver_next;
    Register<bit<32>, slot_t>(NETDIR_SLOTS, 0) ver_done;
    Register<bit<32>, slot_t>(NETDIR_SLOTS, 0) fresh;

    RegisterAction<bit<32>, slot_t, bit<1>>(gen) gen_check = {
        void apply(inout bit<32> value, out bit<1> changed) {
            changed = 0;
            if (value != meta.slot_gen) {
                value = meta.slot_gen;
                changed = 1;
            }
        }
    };

    // ver_done
    RegisterAction<bit<32>, slot_t, bit<1>>(ver_done) done_complete = {
        void apply(inout bit<32> value, out bit<1> moved) {
            moved = 0;
            if (meta.stamp32 > value) {
                value = meta.stamp32;
                moved = 1;
            }
        }
    };
    RegisterAction<bit<32>, slot_t, bit<1>>(ver_done) done_complete_seed = {
        void apply(inout bit<32> value, out bit<1> moved) {
            if (meta.stamp32 > meta.seed32) {
                value = meta.stamp32;
                moved = 1;
            } else {
                value = meta.seed32;
                moved = 0;
            }
        }
    };
    RegisterAction<bit<32>, slot_t, bit<32>>(ver_done) done_read = {
        void apply(inout bit<32> value, out bit<32> rv) {
            rv = value;
        }
    };
    RegisterAction<bit<32>, slot_t, bit<32>>(ver_done) done_seed = {
        void apply(inout bit<32> value, out bit<32> rv) {
            value = meta.seed32;
            rv = meta.seed32;
        }
    };

    // ver_next
    RegisterAction<bit<32>, slot_t, bit<32>>(ver_next) next_stamp = {
        void apply(inout bit<32> value, out bit<32> rv) {
            value = value + 1;
            rv = value;
        }
    };
    RegisterAction<bit<32>, slot_t, bit<32>>(ver_next) next_stamp_seed = {
        void apply(inout bit<32> value, out bit<32> rv) {
            value = meta.seed32 + 1;
            rv = value;
        }
    };
    RegisterAction<bit<32>, slot_t, bit<32>>(ver_next) next_max = {
        void apply(inout bit<32> value) {
            if (meta.stamp32 > value) {
                value = meta.stamp32;
            }
        }
    };
    RegisterAction<bit<32>, slot_t, bit<32>>(ver_next) next_max_seed = {
        void apply(inout bit<32> value) {
            if (meta.stamp32 > meta.seed32) {
                value = meta.stamp32;
            } else {
                value = meta.seed32;
            }
        }
    };
    RegisterAction<bit<32>, slot_t, bit<32>>(ver_next) next_read = {
        void apply(inout bit<32> value, out bit<32> rv) {
            rv = value;
        }
    };
    RegisterAction<bit<32>, slot_t, bit<32>>(ver_next) next_seed = {
        void apply(inout bit<32> value, out bit<32> rv) {
            value = meta.seed32;
            rv = meta.seed32;
        }
    };

    // fresh
    RegisterAction<bit<32>, slot_t, bit<32>>(fresh) fresh_read = {
        void apply(inout bit<32> value, out bit<32> rv) {
            rv = value;
        }
    };
    RegisterAction<bit<32>, slot_t, bit<32>>(fresh) fresh_chain = {
        void apply(inout bit<32> value, out bit<32> rv) {
            value = meta.chain_mask;
            rv = meta.chain_mask;
        }
    };
    RegisterAction<bit<32>, slot_t, bit<32>>(fresh) fresh_add = {
        void apply(inout bit<32> value) {
            value = value | meta.vsb_bit;
        }
    };
    RegisterAction<bit<32>, slot_t, bit<32>>(fresh) fresh_add_seed = {
        void apply(inout bit<32> value) {
            value = meta.chain_mask | meta.vsb_bit;
        }
    };

    apply {
        meta.coh_reason = REASON_NONE;
        meta.stamp32 = hdr.netdir.stamp[31:0];
        meta.seed32 = meta.slot_ver[31:0];
        bool high = hdr.netdir.stamp[63:32] != 0;
        meta.reinit = gen_check.execute(meta.slot) == 1;
        if (meta.coh_cmd == COH_READ) {
            if (meta.reinit) {
                done_seed.execute(meta.slot);
                next_seed.execute(meta.slot);
                meta.fresh = fresh_chain.execute(meta.slot);
            } else {
                meta.fresh = fresh_read.execute(meta.slot);
            }
        } else if (meta.coh_cmd == COH_STAMP) {
            if (meta.reinit) {
                done_seed.execute(meta.slot);
                meta.coh_version = (bit<64>)next_stamp_seed.execute(meta.slot);
            } else {
                meta.coh_version = (bit<64>)next_stamp.execute(meta.slot);
            }
            fresh_chain.execute(meta.slot);
        } else if (meta.coh_cmd == COH_COMPLETE) {
            if (high) {
                meta.stamp32 = 0xffffffff; // saturate: newer than any 32-bit version
            }
            bit<1> moved;
            if (meta.reinit) {
                moved = done_complete_seed.execute(meta.slot);
                next_max_seed.execute(meta.slot);
            } else {
                moved = done_complete.execute(meta.slot);
                next_max.execute(meta.slot);
            }
            if (moved == 1 || meta.reinit) {
                fresh_chain.execute(meta.slot);
            }
        } else if (meta.coh_cmd == COH_EXTRA) {
            bit<32> vd;
            bit<32> vn;
            if (meta.reinit) {
                vd = done_seed.execute(meta.slot);
                vn = next_seed.execute(meta.slot);
            } else {
                vd = done_read.execute(meta.slot);
                vn = next_read.execute(meta.slot);
            }
            if (vn != vd) {
                meta.coh_reason = REASON_VSB_PENDING;
                if (meta.reinit) {
                    fresh_chain.execute(meta.slot);
                }
            } else if (high || meta.stamp32 != vd) {
                meta.coh_reason = REASON_VSB_VERSION;
                if (meta.reinit) {
                    fresh_chain.execute(meta.slot);
                }
            } else if (meta.reinit) {
                fresh_add_seed.execute(meta.slot);
            } else {
                fresh_add.execute(meta.slot);
            }
        }
    }
}

#endif
