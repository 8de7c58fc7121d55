// netdir: v1model spellings of the externs that the shared controls use.
#ifndef NETDIR_V1MODEL_ARCH_P4
#define NETDIR_V1MODEL_ARCH_P4

#define NETDIR_COUNTER(name, size) counter(size, CounterType.packets) name
#define NETDIR_COUNT(name, index) name.count((bit<32>)(index))
// The fine score's range key: the whole 32-bit latency (p4/tna/arch.p4).
#define NETDIR_SCORE_KEY(lat) lat

#endif
