# netdir: the two commands of the README are `make test` and `go run ./cmd/netdir demo`.
GO ?= go
BPF_CFLAGS ?= -I/usr/include/x86_64-linux-gnu

.PHONY: test vet bench generate p4 fuzz spec spec-mutants spec-flaws

# test: vet, then every test. Tests that need root, clang or BMv2 skip with a
# message naming what is missing when those are absent.
test: vet
	$(GO) test -count=1 -timeout 20m ./...

vet:
	$(GO) vet ./...

# bench: the go benchmarks; figures go to BENCHMARKS.md with this command.
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

# fuzz: each decoder's fuzz target for FUZZTIME (default 60s).
FUZZTIME ?= 60s
fuzz:
	$(GO) test ./wire -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME)
	$(GO) test ./wire -run '^$$' -fuzz '^FuzzDecodeHeader$$' -fuzztime $(FUZZTIME)
	$(GO) test ./directory -run '^$$' -fuzz '^FuzzProcess$$' -fuzztime $(FUZZTIME)

# generate: bpf2go and protobuf outputs (committed).
generate:
	$(GO) generate ./...

# p4: compile the P4 programs when p4c is on PATH (outputs committed under p4/build).
p4:
	./scripts/p4-build.sh

# spec: Spin checks the coherence protocol exhaustively (spec/README.md);
# spec-mutants: each weakened rule must give a counterexample; spec-flaws: the
# counterexamples of the code before the fixes. Need spin and gcc.
spec:
	spec/check.sh verify

spec-mutants:
	spec/check.sh mutants

spec-flaws:
	spec/check.sh flaws
