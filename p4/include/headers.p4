// netdir: packet headers and the pipeline's local metadata.
#ifndef NETDIR_HEADERS_P4
#define NETDIR_HEADERS_P4

#include "defines.p4"

header ethernet_t {
    bit<48> dst_addr;
    bit<48> src_addr;
    bit<16> ether_type;
}

header ipv4_t {
    bit<4>  version;
    bit<4>  ihl;
    bit<6>  dscp;
    bit<2>  ecn;
    bit<16> total_len;
    bit<16> identification;
    bit<3>  flags;
    bit<13> frag_offset;
    bit<8>  ttl;
    bit<8>  protocol;
    bit<16> hdr_checksum;
    bit<32> src_addr;
    bit<32> dst_addr;
}

header udp_t {
    bit<16> sport;
    bit<16> dport;
    bit<16> len;
    bit<16> checksum;
}

// The fixed 64-byte netdir header (version 2), exactly as wire/wire.go
// documents it, in network byte order. The key and value lengths (offset 64)
// and the key and value stay in the payload: no data plane parses them.
header netdir_t {
    bit<16>   magic;      //  0
    bit<8>    version;    //  2
    bit<8>    op;         //  3
    bit<8>    flags;      //  4
    bit<8>    code;       //  5
    bit<16>   tenant;     //  6
    bit<64>   reqid;      //  8
    keyhash_t keyhash;    // 16
    version_t stamp;      // 32
    node_t    node;       // 40
    bit<16>   load;       // 42
    bit<32>   epoch;      // 44
    bit<64>   timestamp;  // 48
    bit<32>   delta;      // 56  dmClock δ, stamped on requests (qos.p4)
    bit<32>   rho;        // 60  dmClock ρ
}

struct headers_t {
    ethernet_t ethernet;
    ipv4_t     ipv4;
    udp_t      udp;
    netdir_t   netdir;
}

// Everything the netdir controls pass to each other. Architecture-neutral:
// the top-level programs copy the outcome (egress_port, mcast_grp, drop)
// into their intrinsic metadata.
struct local_meta_t {
    // parser
    bool        is_netdir;      // UDP from or to NETDIR_UDP_PORT
    bool        short_pkt;      // UDP payload shorter than the 64-byte header
    // clock, in ns
    bit<64>     now;
    // classification
    bit<3>      op_class;
    // partition
    bool        part_hit;
    partition_t partition;
    chain_len_t part_r;
    node_t      part_head;
    chain_idx_t pa_idx;         // partition bucket reqid & 31
    node_t      pa_node;
    chain_idx_t pb_idx;         // partition bucket (reqid >> 8) & 31
    node_t      pb_node;
    // directory slot
    bool        slot_hit;
    slot_t      slot;
    loc_len_t   slot_n;
    chain_len_t slot_r;
    node_t      slot_head;
    bit<32>     slot_gen;       // promotion generation (directory entry)
    version_t   slot_ver;       // seed version (directory entry)
    bit<32>     chain_mask;     // (1 << R) - 1: the chain's fresh bits
    loc_t       sa_idx;         // slot bucket reqid & 31
    node_t      sa_node;
    bit<32>     sa_bit;         // 1 << sa_idx
    loc_t       sb_idx;         // slot bucket (reqid >> 8) & 31
    node_t      sb_node;
    bit<32>     sb_bit;
    bit<32>     sa_fresh;       // fresh & sa_bit: zero if candidate a must verify
    bit<32>     sb_fresh;       // fresh & sb_bit
    // coherence
    bit<3>      coh_cmd;
    bit<32>     fresh;          // COH_READ result
    version_t   coh_version;    // COH_STAMP result
    loc_t       vsb_idx;        // the VSB sender's LocationList index
    bit<32>     vsb_bit;        // 1 << vsb_idx
    bool        vsb_member;
    bit<2>      vsb_role;       // VSB_ROLE_*: chain before the tail, tail, extra
    bool        from_storage;   // ingress port is a storage node's
    // fine score (HATS section 4.3) between candidates a and b
    node_t      cand_a;
    node_t      cand_b;
    bit<64>     lat_a;
    bit<64>     lat_b;
    bit<32>     load_a;         // 32 bits wide: added to a quota (fine_score.p4)
    bit<32>     load_b;
    bit<32>     lat_a_key;      // latency clamped to 32 bits, the score tables' key
    bit<32>     lat_b_key;
    bit<32>     quota_a;        // Window / latency a, plus load b (fine_score.p4)
    bit<32>     quota_b;        // Window / latency b, plus load a
    bit<32>     score_diff;     // quota_a - quota_b: its sign picks b
    bit<2>      score_pick;     // PICK_* of an unlearnt candidate, else 0: by the sign
    // outcome
    bit<3>      verdict;
    bit<8>      reason;
    node_t      target;
    port_t      egress_port;
    // node_addr's candidate addresses (node_addr.p4), copied for the target
    bit<48>     addr_a_mac;
    bit<32>     addr_a_ip;
    bit<16>     addr_a_udp;
    port_t      addr_a_port;
    bit<1>      addr_a_known;   // node_addr has candidate a
    bit<48>     addr_b_mac;
    bit<32>     addr_b_ip;
    bit<16>     addr_b_udp;
    port_t      addr_b_port;
    bit<1>      addr_b_known;
    bit<16>     mcast_grp;
    bool        drop;           // no L2 entry; a packet with a reason is dropped too
    bool        rewritten;      // netdir header or addresses changed: fix the UDP checksum
    // dmClock (qos.p4)
    bit<32>     qos_done;       // the tenant's completions (TNA: read in the done pass)
    bit<32>     qos_res;        // its reservation-phase completions
    node_t      qos_node;       // a completion's scheduler, whose mark moves (a request's is its target's)
    // NetdirTail's inputs (pipeline.p4), 1 or 0; on TNA bridged to egress
    bit<1>      qos_request;    // a GET, PUT or DEL: its tenant totals are read
    bit<1>      qos_stamp;      // a request leaves for meta.target: stamp δ and ρ
    bit<1>      qos_complete;   // a completion charged to meta.qos_node
    bit<1>      count_slot;     // a hit: count it in slot_hits[meta.slot]
    bit<1>      count_sketch;   // a miss: count it in the sketch
    // TNA only (incremental UDP checksum, 32-bit coherence and latency)
    bit<16>     udp_residual;
    bool        udp_csum_update;
    bit<32>     sample32;
    bit<32>     ts_set;         // the timestamp's halves ORed: nonzero if set
    bit<32>     lat_new;
    bit<1>      sample_ok;      // a reply's latency sample is taken (p4/tna/node_stats.p4)
    bit<32>     seed32;
    bit<32>     vn32;           // the stamp, raising the stamp floor
    bit<32>     next_arg;       // the version a completion brings (p4/tna/coherence.p4)
    // TNA only: a slot's re-seed takes two passes (p4/tna/coherence.p4)
    bool        resubmit;       // pass 1: resubmit with floor32 and slot_gen
    bool        resubmitted;    // pass 2: floor32 and resub_gen come from pass 1
    bit<32>     floor32;        // the key's stamp floor, read in pass 1
    bit<32>     resub_gen;      // the directory entry's gen in pass 1
    bit<2>      coh_pass;       // COH_PASS_* (p4/tna/coherence.p4)
    bit<1>      stamp_high;     // the stamp has bits above 32 set
    bit<32>     floor_now;      // the key's stamp floor, read in pass 1
    // TNA only: the coherence tables' keys (p4/tna/coherence.p4)
    bit<1>      changed;        // gen: the slot must be re-seeded
    bit<1>      moved;          // ver_done: a completion moved it
    bit<1>      pending;        // ver_done != ver_next: a write is pending
    bit<1>      stamp_is_floor; // stamp == floor32: a re-seed's ver_done
    bit<1>      stamp_is_next;  // stamp == ver_next (read into next_arg)
}

#endif
