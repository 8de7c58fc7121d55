// netdir: what the data plane learns of each storage node from its replies,
// for the fine score; v1model (BMv2). The TNA program has its own
// (p4/tna/node_stats.p4) with two copies of each register, since Tofino
// reads a register once per packet and a GET reads two candidates.
//
// Registers, indexed by node id (< NETDIR_MAX_NODES):
//   latency  EWMA of the reply latency in ns, weight 0.5: (old + sample) >> 1;
//            the first sample is taken as is; never 0 once learnt
//   load     the load (queue depth) the node last reported
//
// learn (a reply): load = header load; if 0 < ts <= now, sample = now - ts
// and the EWMA moves, exactly as directory.learn. Otherwise (a GET with two
// candidates) read both candidates' latency and load.
#ifndef NETDIR_NODE_STATS_P4
#define NETDIR_NODE_STATS_P4

#include "headers.p4"

control NodeStats(in headers_t hdr, inout local_meta_t meta, in bool learn) {
    register<bit<64>>(NETDIR_MAX_NODES) latency;
    register<bit<16>>(NETDIR_MAX_NODES) load;

    apply {
        if (learn) {
            if (hdr.netdir.node < NETDIR_MAX_NODES) {
                bit<32> n = (bit<32>)hdr.netdir.node;
                load.write(n, hdr.netdir.load);
                bit<64> ts = hdr.netdir.timestamp;
                if (ts != 0 && ts <= meta.now) {
                    bit<64> sample = meta.now - ts;
                    bit<64> old;
                    latency.read(old, n);
                    bit<64> lat = sample;
                    if (old != 0) {
                        lat = (old + sample) >> 1;
                    }
                    if (lat == 0) {
                        lat = 1;
                    }
                    latency.write(n, lat);
                }
            }
        } else {
            meta.lat_a = 0;
            meta.lat_b = 0;
            meta.load_a = 0;
            meta.load_b = 0;
            bit<16> load_read;
            if (meta.cand_a < NETDIR_MAX_NODES) {
                latency.read(meta.lat_a, (bit<32>)meta.cand_a);
                load.read(load_read, (bit<32>)meta.cand_a);
                meta.load_a = (bit<32>)load_read;
            }
            if (meta.cand_b < NETDIR_MAX_NODES) {
                latency.read(meta.lat_b, (bit<32>)meta.cand_b);
                load.read(load_read, (bit<32>)meta.cand_b);
                meta.load_b = (bit<32>)load_read;
            }
            // The fine score's keys: the latency clamped to 32 bits (past
            // 2^32 it misses every range and scores 0).
            if (meta.lat_a[63:32] == 0) {
                meta.lat_a_key = meta.lat_a[31:0];
            } else {
                meta.lat_a_key = 0xffffffff;
            }
            if (meta.lat_b[63:32] == 0) {
                meta.lat_b_key = meta.lat_b[31:0];
            } else {
                meta.lat_b_key = 0xffffffff;
            }
        }
    }
}

#endif
