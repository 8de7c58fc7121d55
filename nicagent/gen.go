package nicagent

// The eBPF programs (bpf/netdir.c) compiled by bpf2go; the outputs,
// netdir_bpfel.go and netdir_bpfel.o, are committed. `make generate`
// rebuilds them (clang and libbpf-dev).
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu" -target bpfel -type nd_part -type nd_key -type nd_slot -type nd_buckets -type nd_node -type nd_addr -type nd_src -type nd_counters -type nd_sketch -type nd_floor -type nd_qos -type nd_qos_mark netdir bpf/netdir.c
