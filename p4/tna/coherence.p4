// netdir: coherence state per directory slot for Tofino (TNA), the same
// contract as p4/include/coherence.p4 written with RegisterActions: each
// register is touched by exactly one RegisterAction per pass, in the order
// gen -> ver_done -> ver_next -> fresh -> stamp_floor, and every value a
// RegisterAction takes comes from an earlier stage.
//
// Tofino's stateful ALUs are 32 bits wide: ver_next, ver_done and the stamp
// floors keep the low 32 bits of the VersionStamp (a key wraps after 2^32
// stamped writes; a stamp carries the value zero-extended to 48 bits, below
// the entry's incarnation, the top 16 bits of its seed: wire.MakeStamp,
// spec/README.md flaw G). A VSB whose stamp has high bits set never matches
// ver_done.
//
// Stamp floors (directory.StampFloors, FloorIndex): stamp_floor, indexed by
// the low 14 bits of the KeyHash, is the highest stamp issued to any key of
// that index; it outlives the slot. A stamp raises it to the new ver_next; a
// re-seed takes ver_next = ver_done = max(seed, floor).
//
// Promotion, in two passes. The directory entry carries a gen and a seed
// version; a packet that finds the slot's gen register different must
// re-seed the slot (directory.Insert) before its own command. The re-seed
// needs the floor before ver_done and ver_next, while a stamp needs the new
// ver_next before the floor: with one access per register per pass, no
// stage order serves both in one pass. So:
//   pass 1  gen_read sees the change without writing gen; floor_read reads
//           the key's floor; the packet is resubmitted (meta.resubmit) with
//           that floor and the entry's gen (64 bits of resubmit data), and
//           the pipeline does nothing else: no counter, no rewrite.
//   pass 2  (meta.resubmitted) gen_check replaces the gen and reports the
//           change (meta.reinit); seed32 = max(seed, the carried floor), and
//           every later action has a variant that starts from seed32
//           instead of the stored value. A stamp then raises the floor from
//           the new ver_next, as in any pass.
// Packets of the slot that arrive between the passes find the old gen too
// and are resubmitted as well; whichever comes back first re-seeds, the rest
// find the new gen and run their commands normally. A re-seed happens once
// per promotion, so only a promotion's first packets take the second pass;
// stamps never do. If the entry's gen changed between the passes (the key
// was evicted and promoted again meanwhile) and the slot is still not
// re-seeded, the carried floor may be older than the new promotion: the
// packet is dropped with REASON_RESEED_RACE (the client retries; the
// protocol tolerates loss) rather than seeded from it.
//
// complete(v): ver_done = v if v > ver_done (reporting whether it moved);
// ver_next = max(ver_next, v) unconditionally, which is the same thing since
// ver_next >= ver_done always holds; fresh = chain only if ver_done moved.
#ifndef NETDIR_TNA_COHERENCE_P4
#define NETDIR_TNA_COHERENCE_P4

typedef bit<NETDIR_FLOOR_BITS> floor_idx_t;

control Coherence(in headers_t hdr, inout local_meta_t meta) {
    Register<bit<32>, slot_t>(NETDIR_SLOTS, 0) gen;
    Register<bit<32>, slot_t>(NETDIR_SLOTS, 0) ver_next;
    Register<bit<32>, slot_t>(NETDIR_SLOTS, 0) ver_done;
    Register<bit<32>, slot_t>(NETDIR_SLOTS, 0) fresh;
    Register<bit<32>, floor_idx_t>(NETDIR_FLOORS, 0) stamp_floor;

    // gen: pass 1 only looks, pass 2 replaces.
    RegisterAction<bit<32>, slot_t, bit<1>>(gen) gen_read = {
        void apply(inout bit<32> value, out bit<1> changed) {
            changed = 0;
            if (value != meta.slot_gen) {
                changed = 1;
            }
        }
    };
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

    // stamp_floor: pass 1 of a re-seed reads it; a stamp raises it to the
    // new ver_next (meta.vn32, from the ver_next stage before it).
    RegisterAction<bit<32>, floor_idx_t, bit<32>>(stamp_floor) floor_read = {
        void apply(inout bit<32> value, out bit<32> rv) {
            rv = value;
        }
    };
    RegisterAction<bit<32>, floor_idx_t, bit<32>>(stamp_floor) floor_raise = {
        void apply(inout bit<32> value) {
            if (meta.vn32 > value) {
                value = meta.vn32;
            }
        }
    };

    apply {
        meta.coh_reason = REASON_NONE;
        meta.reinit = false;
        meta.stamp32 = hdr.netdir.stamp[31:0];
        meta.seed32 = meta.slot_ver[31:0];
        floor_idx_t fi = hdr.netdir.keyhash[NETDIR_FLOOR_BITS-1:0]; // directory.FloorIndex
        bool high = hdr.netdir.stamp[63:32] != 0;

        // Pass 1 of a re-seed, or the race that a second pass cannot seed.
        bool stop = false;
        if (!meta.resubmitted) {
            if (gen_read.execute(meta.slot) == 1) {
                meta.floor32 = floor_read.execute(fi);
                meta.resubmit = true; // resubmit data: floor32 and slot_gen
                stop = true;
            }
        } else if (meta.resub_gen != meta.slot_gen) {
            if (gen_read.execute(meta.slot) == 1) {
                meta.coh_reason = REASON_RESEED_RACE;
                stop = true;
            }
        } else {
            meta.reinit = gen_check.execute(meta.slot) == 1;
        }
        if (meta.floor32 > meta.seed32) {
            meta.seed32 = meta.floor32; // max(seed, floor); used only when reinit
        }

        if (stop) {
            // nothing more in this pass
        } else if (meta.coh_cmd == COH_READ) {
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
                meta.vn32 = next_stamp_seed.execute(meta.slot);
            } else {
                meta.vn32 = next_stamp.execute(meta.slot);
            }
            // The entry's incarnation above the version (wire.MakeStamp).
            meta.coh_version = meta.slot_ver[63:48] ++ 16w0 ++ meta.vn32;
            fresh_chain.execute(meta.slot);
            floor_raise.execute(fi);
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
