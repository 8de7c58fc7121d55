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
