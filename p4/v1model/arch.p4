// netdir: v1model spellings of the externs that the shared controls use.
#ifndef NETDIR_V1MODEL_ARCH_P4
#define NETDIR_V1MODEL_ARCH_P4

#define NETDIR_COUNTER(name, size) counter(size, CounterType.packets) name
#define NETDIR_COUNT(name, index) name.count((bit<32>)(index))

#endif
