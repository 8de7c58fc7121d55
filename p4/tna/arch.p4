// netdir: TNA spellings of the externs that the shared controls use, and the
// parser hooks for the incremental UDP checksum.
#ifndef NETDIR_TNA_ARCH_P4
#define NETDIR_TNA_ARCH_P4

#define NETDIR_COUNTER(name, size) Counter<bit<32>, bit<32>>(size, CounterType_t.PACKETS) name
#define NETDIR_COUNT(name, index) name.count((bit<32>)(index))

// The fine score's range key. p4c-barefoot matches a range on at most 5
// PHV nibbles, so the latency keys by its low 20 bits, and NodeStats clamps
// the latency it reads to NETDIR_SCORE_KEY_MAX (2^20 - 1 ns, about 1.05 ms).
// The controller keeps the Window below that, so no entry covers a clamped
// latency, which scores Window / t = 0 as any t > Window does: exact.
#define NETDIR_SCORE_KEY(lat) lat[19:0]
#define NETDIR_SCORE_KEY_MAX 0xfffff

// A forwarded request's egress port: TNA's send table (p4/tna/netdir.p4)
// takes it from the candidate's address itself, keyed by the verdict's
// inputs, so that it shares the verdict's stage; a write of
// meta.egress_port here would make it wait a stage for the verdict.
#define NETDIR_NODE_PORT(port)
// Likewise the drop reason of a target without an address: the drops
// count (pipeline.p4) and TNA's drop_flags find it from the verdict's
// inputs, and nothing after the verdict reads meta.reason.
#define NETDIR_ADDR_REASON(r)

// Ingress may rewrite: IPv4 destination, UDP destination port, netdir
// flags (with code, one 16-bit word), stamp, node and timestamp (egress
// rewrites delta and rho, and fixes the checksum for them). Subtract
// them and the old checksum; what is left (pseudo-header, unchanged fields,
// key and value) is the residual the deparser adds back.
#define NETDIR_PARSER_DECLS Checksum() udp_csum;
#define NETDIR_PARSER_IPV4_HOOK udp_csum.subtract({ hdr.ipv4.dst_addr });
#define NETDIR_PARSER_UDP_HOOK udp_csum.subtract({ hdr.udp.dport, hdr.udp.checksum });
#define NETDIR_PARSER_NETDIR_HOOK \
        udp_csum.subtract({ hdr.netdir.flags, hdr.netdir.code, hdr.netdir.stamp, \
                            hdr.netdir.node, hdr.netdir.timestamp }); \
        udp_csum.subtract_all_and_deposit(meta.udp_residual);

#endif
