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
//           every later action starts from seed32 instead of the stored
//           value when meta.reinit is set. A stamp then raises the floor
//           from the new ver_next, as in any pass.
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

    // ver_done and ver_next: one RegisterAction per use, the re-seed folded
    // in (at most 4 per register on Tofino). meta.reinit says the slot is
    // being re-seeded: the stored value is the previous key's and seed32
    // replaces it. meta.next_arg is the version a completion brings, or on
    // a re-seed the state carried from pass 1, max(seed, floor, version).
    // complete: moved reports ver_done rising, which matters only without
    // a re-seed (a re-seed sets fresh to the chain anyway).
    RegisterAction<bit<32>, slot_t, bit<1>>(ver_done) done_complete = {
        void apply(inout bit<32> value, out bit<1> moved) {
            moved = 0;
            if (meta.reinit) {
                value = meta.next_arg;
            } else if (meta.next_arg > value) {
                value = meta.next_arg;
                moved = 1;
            }
        }
    };
    RegisterAction<bit<32>, slot_t, bit<32>>(ver_done) done_read = {
        void apply(inout bit<32> value, out bit<32> rv) {
            if (meta.reinit) {
                value = meta.seed32;
            }
            rv = value;
        }
    };

    RegisterAction<bit<32>, slot_t, bit<32>>(ver_next) next_stamp = {
        void apply(inout bit<32> value, out bit<32> rv) {
            if (meta.reinit) {
                value = meta.seed32 + 1;
            } else {
                value = value + 1;
            }
            rv = value;
        }
    };
    RegisterAction<bit<32>, slot_t, bit<32>>(ver_next) next_max = {
        void apply(inout bit<32> value) {
            if (meta.reinit || meta.next_arg > value) {
                value = meta.next_arg;
            }
        }
    };
    RegisterAction<bit<32>, slot_t, bit<32>>(ver_next) next_read = {
        void apply(inout bit<32> value, out bit<32> rv) {
            if (meta.reinit) {
                value = meta.seed32;
            }
            rv = value;
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

    // The larger of two run-time values, which Tofino's gateways cannot
    // compare and a stateful ALU can: one scratch cell each, written and
    // read back by the same packet, so packets never share a value.
    Register<bit<32>, bit<1>>(1, 0) seed_cmp;
    RegisterAction<bit<32>, bit<1>, bit<32>>(seed_cmp) seed_max = {
        void apply(inout bit<32> value, out bit<32> rv) {
            if (meta.next_arg > meta.seed32) {
                value = meta.next_arg;
            } else {
                value = meta.seed32;
            }
            rv = value;
        }
    };
    Register<bit<32>, bit<1>>(1, 0) floor_cmp;
    RegisterAction<bit<32>, bit<1>, bit<32>>(floor_cmp) floor_max = {
        void apply(inout bit<32> value, out bit<32> rv) {
            if (meta.floor32 > meta.seed32) {
                value = meta.floor32;
            } else {
                value = meta.seed32;
            }
            rv = value;
        }
    };

    apply {
        meta.coh_reason = REASON_NONE;
        meta.reinit = false;
        meta.stamp32 = hdr.netdir.stamp[31:0];
        meta.seed32 = meta.slot_ver[31:0];
        floor_idx_t fi = hdr.netdir.keyhash[NETDIR_FLOOR_BITS-1:0]; // directory.FloorIndex
        // The version a completion brings; a stamp with high bits set
        // saturates: newer than any 32-bit version.
        bool high = false;
        if (hdr.netdir.stamp[63:32] != 0) {
            high = true;
        }
        meta.next_arg = 0;
        if (meta.coh_cmd == COH_COMPLETE) {
            if (high) {
                meta.next_arg = 0xffffffff;
            } else {
                meta.next_arg = meta.stamp32;
            }
        }

        // Pass 1 of a re-seed, or the race that a second pass cannot seed.
        // Pass 1 carries the slot's new state: max(seed, floor), and for a
        // completion also its version (ver_done = ver_next = the largest).
        bool stop = false;
        if (!meta.resubmitted) {
            if (gen_read.execute(meta.slot) == 1) {
                meta.seed32 = seed_max.execute(0);
                meta.floor32 = floor_read.execute(fi);
                meta.floor32 = floor_max.execute(0);
                meta.resubmit = true; // resubmit data: floor32 and slot_gen
                stop = true;
            }
        } else if (meta.resub_gen != meta.slot_gen) {
            if (gen_read.execute(meta.slot) == 1) {
                meta.coh_reason = REASON_RESEED_RACE;
                stop = true;
            }
        } else {
            meta.seed32 = meta.floor32; // the state from pass 1; used only when reinit
            if (gen_check.execute(meta.slot) == 1) {
                meta.reinit = true;
                meta.next_arg = meta.floor32;
            }
        }

        if (stop) {
            // nothing more in this pass
        } else if (meta.coh_cmd == COH_READ) {
            if (meta.reinit) {
                done_read.execute(meta.slot);
                next_read.execute(meta.slot);
                meta.fresh = fresh_chain.execute(meta.slot);
            } else {
                meta.fresh = fresh_read.execute(meta.slot);
            }
        } else if (meta.coh_cmd == COH_STAMP) {
            if (meta.reinit) {
                done_read.execute(meta.slot);
            }
            meta.vn32 = next_stamp.execute(meta.slot);
            // The entry's incarnation above the version (wire.MakeStamp).
            meta.coh_version = meta.slot_ver[63:48] ++ 16w0 ++ meta.vn32;
            fresh_chain.execute(meta.slot);
            floor_raise.execute(fi);
        } else if (meta.coh_cmd == COH_COMPLETE) {
            bit<1> moved = done_complete.execute(meta.slot);
            next_max.execute(meta.slot);
            if (moved == 1 || meta.reinit) {
                fresh_chain.execute(meta.slot);
            }
        } else if (meta.coh_cmd == COH_EXTRA) {
            bit<32> vd = done_read.execute(meta.slot);
            bit<32> vn = next_read.execute(meta.slot);
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
