// netdir: coherence state per directory slot, for v1model (BMv2). The TNA
// program has the same control with RegisterActions (p4/tna/coherence.p4).
//
// Registers, indexed by slot:
//   ver_next  the last version stamped on a write (bit<64>)
//   ver_done  the last version seen complete at the tail (bit<64>)
//   fresh     bit i: LocationList member i may serve reads of ver_done
//   gen       the promotion generation the three above belong to
// and one indexed by the key's FloorIndex, the low 14 bits of the KeyHash
// (hash bytes 14 and 15, directory.FloorIndex), not by slot:
//   stamp_floor  the highest stamp issued to any key of that index
//                (bit<64>, NETDIR_FLOORS entries); it outlives the slot
//
// Promotion through table writes only: the directory entry carries a
// generation and a seed version. The first packet of a slot whose gen
// register differs re-seeds it: ver_next = ver_done = max(seed,
// stamp_floor[FloorIndex]), fresh = the chain (directory.Insert), then runs
// its command (the seed is the low 48 bits of the entry's ver; its top 16
// are the incarnation, which only stamps use). Until then the slot's
// registers still show the previous key;
// its effective state is that seed. The floor keeps a key that was evicted
// with a stamped write in flight, and promoted again, from being seeded
// below that write (spec/coherence.pml, flaw B).
//
// One command per packet (meta.coh_cmd), as directory/process.go does:
//   COH_READ      GET hit: read fresh.
//   COH_STAMP     PUT/DEL hit: ver_next += 1, fresh = the chain,
//                 stamp_floor = max(stamp_floor, ver_next); the stamp is
//                 ver_next below the entry's incarnation (the top 16 bits
//                 of its seed, wire.MakeStamp; spec/README.md, flaw G).
//   COH_COMPLETE  PUT/DEL reply with code OK, or a VSB from the tail:
//                 if v > ver_done: ver_done = v, ver_next = max(ver_next, v),
//                 fresh = the chain.
//   COH_VSB       VSB from a member: by its role (vsb_filter.vsb_roles) the
//                 tail's is COH_COMPLETE, an extra's COH_EXTRA, and one
//                 from before the tail is refused (REASON_VSB_NOT_MEMBER)
//                 without touching the state.
//   COH_EXTRA     VSB from an extra copy: set its fresh bit only if
//                 ver_next == ver_done (no write pending) and v == ver_done;
//                 otherwise report REASON_VSB_PENDING or REASON_VSB_VERSION.
// stamp_floor is read at most once and written at most once per packet (a
// re-seed and a stamp share the read), as on Tofino.
//
// P4Runtime cannot read or write registers on BMv2/PI: the controller never
// needs to (promotion seeds them through gen, above); tests read them over
// BMv2's Thrift API (p4/bmv2test).
#ifndef NETDIR_COHERENCE_P4
#define NETDIR_COHERENCE_P4

#include "headers.p4"

// The v1model control's own commands, past those of defines.p4.
const bit<3> COH_NONE  = 0; // no command (the metadata's initial value)
const bit<3> COH_EXTRA = 4; // extra's VSB: set its fresh bit if no write pending

control Coherence(in headers_t hdr, inout local_meta_t meta) {
    register<version_t>(NETDIR_SLOTS) ver_next;
    register<version_t>(NETDIR_SLOTS) ver_done;
    register<bit<32>>(NETDIR_SLOTS) fresh;
    register<bit<32>>(NETDIR_SLOTS) gen;
    register<version_t>(NETDIR_FLOORS) stamp_floor;

    apply {
        bit<3> cmd = meta.coh_cmd;
        if (cmd == COH_NONE) {
            return;
        } else if (cmd == COH_VSB) {
            if (meta.vsb_role == VSB_ROLE_TAIL) {
                cmd = COH_COMPLETE; // the tail announces a commit
            } else if (meta.vsb_role == VSB_ROLE_EXTRA) {
                cmd = COH_EXTRA;
            } else {
                meta.reason = REASON_VSB_NOT_MEMBER;
                return;
            }
        }
        bit<32> s = (bit<32>)meta.slot;
        version_t vn;
        version_t vd;
        bit<32> f;
        bit<32> g;
        bit<32> fi = (bit<32>)hdr.netdir.keyhash[NETDIR_FLOOR_BITS-1:0]; // directory.FloorIndex
        version_t fl = 0;
        gen.read(g, s);
        bool reseed = g != meta.slot_gen;
        if (reseed || cmd == COH_STAMP) {
            stamp_floor.read(fl, fi);
        }
        if (reseed) {
            version_t seed = (version_t)meta.slot_ver[47:0]; // the seed's version (wire.StampVersion)
            if (fl > seed) {
                seed = fl;
            }
            gen.write(s, meta.slot_gen);
            ver_next.write(s, seed);
            ver_done.write(s, seed);
            fresh.write(s, meta.chain_mask);
        }
        if (cmd == COH_READ) {
            fresh.read(f, s);
            meta.fresh = f;
        } else if (cmd == COH_STAMP) {
            ver_next.read(vn, s);
            vn = vn + 1;
            ver_next.write(s, vn);
            fresh.write(s, meta.chain_mask);
            if (vn > fl) {
                stamp_floor.write(fi, vn);
            }
            // The stamp: the entry's incarnation (the seed's top 16 bits)
            // above the version (wire.MakeStamp; spec/README.md, flaw G).
            meta.coh_version = meta.slot_ver[63:48] ++ vn[47:0];
        } else if (cmd == COH_COMPLETE) {
            ver_done.read(vd, s);
            if (hdr.netdir.stamp > vd) {
                ver_done.write(s, hdr.netdir.stamp);
                ver_next.read(vn, s);
                if (hdr.netdir.stamp > vn) {
                    ver_next.write(s, hdr.netdir.stamp);
                }
                fresh.write(s, meta.chain_mask);
            }
        } else if (cmd == COH_EXTRA) {
            ver_next.read(vn, s);
            ver_done.read(vd, s);
            if (vn != vd) {
                meta.reason = REASON_VSB_PENDING;
            } else if (hdr.netdir.stamp != vd) {
                meta.reason = REASON_VSB_VERSION;
            } else {
                fresh.read(f, s);
                fresh.write(s, f | meta.vsb_bit);
            }
        }
    }
}

#endif
