// netdir: the counters that let the controller find hot keys. Indexed P4
// counters, readable over P4Runtime (CounterEntry reads), never registers
// (P4Runtime register reads are not implemented on BMv2/PI).
//
//   slot_hits            per directory slot: GET and PUT/DEL hits (Slot.Hits)
//   sketch_row0..3       count-min sketch over misses, 4 rows of 1024: row r's
//                        column is ((h[4+2r] << 8) | h[5+2r]) & 1023, hash
//                        bytes 4..11, independent of the partition bits
//                        (directory.sketchIndex). The estimate is the minimum
//                        over the rows; the controller resets the rows each
//                        round by writing zero counters.
//
// The counter declarations are architecture macros (NETDIR_COUNTER,
// NETDIR_COUNT from p4/v1model/arch.p4 or p4/tna/arch.p4).
#ifndef NETDIR_HOT_KEYS_P4
#define NETDIR_HOT_KEYS_P4

#include "headers.p4"

control HotKeys(in headers_t hdr, in local_meta_t meta, in bool hit, in bool miss) {
    NETDIR_COUNTER(slot_hits, NETDIR_SLOTS);
    NETDIR_COUNTER(sketch_row0, NETDIR_SKETCH_COLS);
    NETDIR_COUNTER(sketch_row1, NETDIR_SKETCH_COLS);
    NETDIR_COUNTER(sketch_row2, NETDIR_SKETCH_COLS);
    NETDIR_COUNTER(sketch_row3, NETDIR_SKETCH_COLS);

    apply {
        if (hit) {
            NETDIR_COUNT(slot_hits, meta.slot);
        }
        if (miss) {
            // Bit 127 is the first bit of hash byte 0; byte k is bits
            // [127-8k : 120-8k], so the low 10 bits of bytes 4+2r, 5+2r are
            // bits [89-16r : 80-16r].
            NETDIR_COUNT(sketch_row0, hdr.netdir.keyhash[89:80]);
            NETDIR_COUNT(sketch_row1, hdr.netdir.keyhash[73:64]);
            NETDIR_COUNT(sketch_row2, hdr.netdir.keyhash[57:48]);
            NETDIR_COUNT(sketch_row3, hdr.netdir.keyhash[41:32]);
        }
    }
}

#endif
