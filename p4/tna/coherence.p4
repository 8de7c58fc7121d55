// netdir: coherence state per directory slot for Tofino (TNA), the same
// contract as p4/include/coherence.p4 written with RegisterActions: each
// register is touched by exactly one RegisterAction per pass, in the order
// gen -> ver_next -> ver_done and stamp_floor -> fresh, and every value a
// RegisterAction takes comes from an earlier stage. Each register has one
// table, whose constant entries pick its RegisterAction (below).
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
//           change; then the re-seed's actions set ver_done and ver_next
//           from the carried state, meta.floor32 = max(seed, floor, and for
//           a completion its version), ver_next one more for a stamp
//           (next_seed_stamp), fresh the chain, and the command runs on
//           that. A stamp then raises the floor from the new ver_next, as
//           in any pass.
// Any packet that may touch the slot's state (a hit of a GET, PUT/DEL,
// write reply or VSB) checks the gen, before the command is known (on
// Tofino the VSB's command waits for two lookups); one that has no command
// (a refused VSB, a write reply not ok) re-seeds all the same in its second
// pass, which leaves the slot's effective state as it was: the seed.
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

// Coherence.apply's pass (meta.coh_pass), set by the pipeline from the
// parser's resubmit data: a first pass; a second whose entry's gen is still
// the first pass's; a second whose entry changed meanwhile (the race).
const bit<2> COH_PASS_FIRST  = 0;
const bit<2> COH_PASS_RESEED = 1;
const bit<2> COH_PASS_RACE   = 2;

control Coherence(in headers_t hdr, inout local_meta_t meta) {
    Register<bit<32>, slot_t>(NETDIR_SLOTS, 0) gen;
    Register<bit<32>, slot_t>(NETDIR_SLOTS, 0) ver_next;
    Register<bit<32>, slot_t>(NETDIR_SLOTS, 0) ver_done;
    Register<bit<32>, slot_t>(NETDIR_SLOTS, 0) fresh;
    Register<bit<32>, floor_idx_t>(NETDIR_FLOORS, 0) stamp_floor;

    // gen: a first pass (and the race check) only looks, a second replaces.
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

    // ver_next, then ver_done: a re-seed's action sets the carried state
    // (meta.floor32); the others act on the stored value. Each register has
    // one table (below) whose constant entries pick its action.
    RegisterAction<bit<32>, slot_t, bit<32>>(ver_done) done_seed = {
        void apply(inout bit<32> value) {
            value = meta.floor32;
        }
    };
    RegisterAction<bit<32>, slot_t, bit<1>>(ver_done) done_complete = {
        void apply(inout bit<32> value, out bit<1> moved) {
            moved = 0;
            if (meta.next_arg > value) {
                value = meta.next_arg;
                moved = 1;
            }
        }
    };
    // An extra's VSB: next_arg holds ver_next, read a stage before.
    RegisterAction<bit<32>, slot_t, bit<1>>(ver_done) done_pending = {
        void apply(inout bit<32> value, out bit<1> pending) {
            pending = 0;
            if (value != meta.next_arg) {
                pending = 1;
            }
        }
    };

    // A register's actions take at most 2 PHV inputs between them
    // (floor32, next_arg); next_max with next_arg 0 is a read.
    RegisterAction<bit<32>, slot_t, bit<32>>(ver_next) next_seed = {
        void apply(inout bit<32> value, out bit<32> rv) {
            value = meta.floor32;
            rv = value;
        }
    };
    RegisterAction<bit<32>, slot_t, bit<32>>(ver_next) next_seed_stamp = {
        void apply(inout bit<32> value, out bit<32> rv) {
            value = meta.floor32 + 1;
            rv = value;
        }
    };
    RegisterAction<bit<32>, slot_t, bit<32>>(ver_next) next_stamp = {
        void apply(inout bit<32> value, out bit<32> rv) {
            value = value + 1;
            rv = value;
        }
    };
    RegisterAction<bit<32>, slot_t, bit<32>>(ver_next) next_max = {
        void apply(inout bit<32> value, out bit<32> rv) {
            if (meta.next_arg > value) {
                value = meta.next_arg;
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

    // stamp_floor: a first pass that must re-seed reads it; a stamp raises
    // it to the new ver_next (meta.vn32, from the ver_next stage before).
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
            if (meta.floor_now > meta.seed32) {
                value = meta.floor_now;
            } else {
                value = meta.seed32;
            }
            rv = value;
        }
    };

    // One table per register, in stage order gen, ver_next, ver_done (with
    // stamp_floor), fresh. Each picks its RegisterAction by constant entries
    // on what is known when it runs: gen's `changed`, the pass, the command,
    // the VSB sender's role, and the flags of the stages before. Tofino
    // places every table of a register in the register's stage, so one call
    // site each (not one per branch) is what lets them share it. The entries
    // are in priority order; each table's cases are those of the branches
    // of p4/include/coherence.p4 (the contract), in this order: a first pass
    // that must re-seed (nothing but the resubmit), the race (a reason),
    // the re-seed, then the commands on the stored state.
    action gen_read_changed() {
        meta.changed = gen_read.execute(meta.slot);
    }
    action gen_check_changed() {
        meta.changed = gen_check.execute(meta.slot);
    }

    // The pipeline applies Coherence to every packet (no condition around
    // it, p4/include/pipeline.p4): gen_op admits a hit of a GET, PUT/DEL,
    // write reply or VSB, whatever its command. Anything else leaves
    // `changed` 0 and has no command, so no other table here matches it.
    @hidden
    table gen_op {
        key = {
            meta.slot_hit: exact;
            meta.op_class: ternary;
            meta.coh_pass: ternary;
        }
        actions = {
            gen_read_changed;
            gen_check_changed;
            NoAction;
        }
        // A default action cannot execute a RegisterAction (its index
        // needs the hash distribution unit): every pass has an entry.
        const default_action = NoAction();
        const entries = {
            (false, _, _): NoAction();
            (true, CLASS_REPLY, _): NoAction();
            (true, CLASS_NODE_OP, _): NoAction();
            (true, CLASS_OTHER, _): NoAction();
            (true, _, COH_PASS_FIRST): gen_read_changed();
            (true, _, COH_PASS_RESEED): gen_check_changed();
            (true, _, COH_PASS_RACE): gen_read_changed();
            (true, _, 3): gen_read_changed();
        }
    }

    action next_reseed() {
        next_seed.execute(meta.slot);
    }
    action next_reseed_stamp() {
        meta.vn32 = next_seed_stamp.execute(meta.slot);
    }
    action next_stamp_vn() {
        meta.vn32 = next_stamp.execute(meta.slot);
    }
    action next_complete() {
        next_max.execute(meta.slot);
    }
    // An extra's VSB: next_arg is 0, so next_max reads ver_next, which
    // done_pending then compares with ver_done.
    action next_read_arg() {
        meta.next_arg = next_max.execute(meta.slot);
    }

    @hidden
    table ver_next_op {
        key = {
            meta.changed: ternary;
            meta.coh_pass: ternary;
            meta.coh_cmd: ternary;
            meta.vsb_role: ternary;
        }
        actions = {
            next_reseed;
            next_reseed_stamp;
            next_stamp_vn;
            next_complete;
            next_read_arg;
            NoAction;
        }
        const default_action = NoAction();
        const entries = {
            (1, COH_PASS_FIRST, _, _): NoAction();
            (1, COH_PASS_RACE, _, _): NoAction();
            (1, _, COH_STAMP, _): next_reseed_stamp();
            (1, _, _, _): next_reseed();
            (0, _, COH_STAMP, _): next_stamp_vn();
            (0, _, COH_COMPLETE, _): next_complete();
            (0, _, COH_VSB, VSB_ROLE_TAIL): next_complete();
            (0, _, COH_VSB, VSB_ROLE_EXTRA): next_read_arg();
        }
    }

    action done_reseed() {
        done_seed.execute(meta.slot);
    }
    action done_complete_moved() {
        meta.moved = done_complete.execute(meta.slot);
    }
    action done_extra_pending() {
        meta.pending = done_pending.execute(meta.slot);
    }

    @hidden
    table ver_done_op {
        key = {
            meta.changed: ternary;
            meta.coh_pass: ternary;
            meta.coh_cmd: ternary;
            meta.vsb_role: ternary;
        }
        actions = {
            done_reseed;
            done_complete_moved;
            done_extra_pending;
            NoAction;
        }
        const default_action = NoAction();
        const entries = {
            (1, COH_PASS_FIRST, _, _): NoAction();
            (1, COH_PASS_RACE, _, _): NoAction();
            (1, _, _, _): done_reseed();
            (0, _, COH_COMPLETE, _): done_complete_moved();
            (0, _, COH_VSB, VSB_ROLE_TAIL): done_complete_moved();
            (0, _, COH_VSB, VSB_ROLE_EXTRA): done_extra_pending();
        }
    }

    action floor_read_now() {
        meta.floor_now = floor_read.execute(hdr.netdir.keyhash[NETDIR_FLOOR_BITS-1:0]);
    }
    action floor_raise_vn() {
        floor_raise.execute(hdr.netdir.keyhash[NETDIR_FLOOR_BITS-1:0]);
    }

    @hidden
    table floor_op {
        key = {
            meta.changed: ternary;
            meta.coh_pass: ternary;
            meta.coh_cmd: ternary;
        }
        actions = {
            floor_read_now;
            floor_raise_vn;
            NoAction;
        }
        const default_action = NoAction();
        const entries = {
            (1, COH_PASS_FIRST, _): floor_read_now();
            (1, COH_PASS_RACE, _): NoAction();
            (_, _, COH_STAMP): floor_raise_vn();
        }
    }

    action fresh_read_cmd() {
        meta.fresh = fresh_read.execute(meta.slot);
    }
    action fresh_chain_cmd() {
        meta.fresh = fresh_chain.execute(meta.slot);
    }
    action fresh_chain_refuse(bit<8> reason) {
        fresh_chain.execute(meta.slot);
        meta.reason = reason;
    }
    action fresh_add_cmd() {
        fresh_add.execute(meta.slot);
    }
    action fresh_add_seed_cmd() {
        fresh_add_seed.execute(meta.slot);
    }
    action refuse(bit<8> reason) {
        meta.reason = reason;
    }

    @hidden
    table fresh_op {
        key = {
            meta.changed: ternary;
            meta.coh_pass: ternary;
            meta.coh_cmd: ternary;
            meta.vsb_role: ternary;
            meta.moved: ternary;
            meta.pending: ternary;
            meta.stamp_high: ternary;
            meta.stamp_is_floor: ternary;
            meta.stamp_is_next: ternary;
        }
        actions = {
            fresh_read_cmd;
            fresh_chain_cmd;
            fresh_chain_refuse;
            fresh_add_cmd;
            fresh_add_seed_cmd;
            refuse;
            NoAction;
        }
        const default_action = NoAction();
        const entries = {
            (1, COH_PASS_FIRST, _, _, _, _, _, _, _): NoAction();
            (1, COH_PASS_RACE, _, _, _, _, _, _, _): refuse(REASON_RESEED_RACE);
            // The re-seed (ver_done = floor32), then the command.
            (1, _, COH_READ, _, _, _, _, _, _): fresh_chain_cmd();
            (1, _, COH_VSB, VSB_ROLE_EXTRA, _, _, 0, 1, _): fresh_add_seed_cmd();
            (1, _, COH_VSB, VSB_ROLE_EXTRA, _, _, _, _, _): fresh_chain_refuse(REASON_VSB_VERSION);
            (1, _, COH_VSB, VSB_ROLE_TAIL, _, _, _, _, _): fresh_chain_cmd();
            (1, _, COH_VSB, _, _, _, _, _, _): fresh_chain_refuse(REASON_VSB_NOT_MEMBER);
            (1, _, _, _, _, _, _, _, _): fresh_chain_cmd(); // a stamp, a completion, none
            // The stored state.
            (0, _, COH_READ, _, _, _, _, _, _): fresh_read_cmd();
            (0, _, COH_STAMP, _, _, _, _, _, _): fresh_chain_cmd();
            (0, _, COH_COMPLETE, _, 1, _, _, _, _): fresh_chain_cmd();
            (0, _, COH_VSB, VSB_ROLE_TAIL, 1, _, _, _, _): fresh_chain_cmd();
            (0, _, COH_VSB, VSB_ROLE_EXTRA, _, 1, _, _, _): refuse(REASON_VSB_PENDING);
            (0, _, COH_VSB, VSB_ROLE_EXTRA, _, 0, 0, _, 1): fresh_add_cmd();
            (0, _, COH_VSB, VSB_ROLE_EXTRA, _, _, _, _, _): refuse(REASON_VSB_VERSION);
            (0, _, COH_VSB, VSB_ROLE_CHAIN, _, _, _, _, _): refuse(REASON_VSB_NOT_MEMBER);
            (0, _, COH_VSB, 3, _, _, _, _, _): refuse(REASON_VSB_NOT_MEMBER);
        }
    }

    apply {
        meta.seed32 = meta.slot_ver[31:0];
        // The version a completion brings (0 otherwise, so that next_max
        // reads); a stamp with high bits set saturates: newer than any
        // 32-bit version.
        if (hdr.netdir.stamp[63:32] != 0) {
            meta.stamp_high = 1;
        }
        if (meta.coh_cmd == COH_COMPLETE || (meta.coh_cmd == COH_VSB && meta.vsb_role == VSB_ROLE_TAIL)) {
            if (hdr.netdir.stamp[63:32] != 0) {
                meta.next_arg = 0xffffffff;
            } else {
                meta.next_arg = hdr.netdir.stamp[31:0];
            }
        }
        if (meta.resubmitted) {
            if (meta.resub_gen == meta.slot_gen) {
                meta.coh_pass = COH_PASS_RESEED;
            } else {
                meta.coh_pass = COH_PASS_RACE;
            }
        }
        // A re-seed's ver_done is the carried floor32.
        if (hdr.netdir.stamp[31:0] == meta.floor32) {
            meta.stamp_is_floor = 1;
        }

        // The slot's gen, as early as the hit is known.
        gen_op.apply();
        if (meta.changed == 1 && meta.coh_pass == COH_PASS_FIRST) {
            // Pass 1: carry max(seed, floor, the completion's version) and
            // the entry's gen to pass 2; nothing else in this pass.
            meta.resubmit = true;
            meta.seed32 = seed_max.execute(0);
        }
        ver_next_op.apply();
        // An extra's VSB: its stamp against ver_next (equal to ver_done
        // unless a write is pending, which done_pending reports).
        if (hdr.netdir.stamp[31:0] == meta.next_arg) {
            meta.stamp_is_next = 1;
        }
        ver_done_op.apply();
        floor_op.apply();
        fresh_op.apply();
        if (meta.changed == 1 && meta.coh_pass == COH_PASS_FIRST) {
            meta.floor32 = floor_max.execute(0);
        }
        // The entry's incarnation above the version (wire.MakeStamp).
        meta.coh_version = meta.slot_ver[63:48] ++ 16w0 ++ meta.vn32;
    }
}

#endif
