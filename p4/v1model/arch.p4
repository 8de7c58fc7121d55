// netdir: v1model spellings of the externs that the shared controls use.
#ifndef NETDIR_V1MODEL_ARCH_P4
#define NETDIR_V1MODEL_ARCH_P4

#define NETDIR_COUNTER(name, size) counter(size, CounterType.packets) name
#define NETDIR_COUNT(name, index) name.count((bit<32>)(index))
// The fine score's range key: the whole 32-bit latency (p4/tna/arch.p4).
#define NETDIR_SCORE_KEY(lat) lat
// A forwarded request's egress port, from its target's address: the top
// level sends by meta.egress_port (p4/tna/arch.p4: TNA's send table reads
// the candidates' ports itself).
#define NETDIR_NODE_PORT(port) meta.egress_port = port
// A forwarded request's drop reason, none or REASON_NO_NODE_ADDR: the top
// level drops by meta.reason.
#define NETDIR_ADDR_REASON(r) meta.reason = r

#endif
