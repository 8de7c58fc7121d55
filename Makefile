# netdir: the two commands of the README are `make test` and `go run ./cmd/netdir demo`.
GO ?= go
BPF_CFLAGS ?= -I/usr/include/x86_64-linux-gnu

.PHONY: test race vet bench generate p4 fuzz spec spec-mutants spec-flaws

# test: vet, then every test. Tests that need root, clang or BMv2 skip with a
# message naming what is missing when those are absent.
test: vet
	$(GO) test -count=1 -timeout 20m ./...

# race: every package's tests under the race detector, shortened (-short:
# the linearizability check's 10 seeds, no kill -9 restart); the BMv2 and
# network-namespace suites are left out (root, BMv2, fixed names). On 2
# shared cores: 2.5 min with the race build cached, 5 min from a cold cache.
race:
	$(GO) test -race -count=1 -timeout 10m -short -skip 'BMv2|Netns' $$($(GO) list ./... | grep -v /p4/bmv2test)

vet:
	$(GO) vet ./...

# bench: the go benchmarks; figures go to BENCHMARKS.md with this command.
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

# fuzz: each decoder's, loader's and API handler's fuzz target for FUZZTIME
# (default 60s); `make test` runs their seed corpora.
FUZZTIME ?= 60s
fuzz:
	$(GO) test ./wire -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME)
	$(GO) test ./wire -run '^$$' -fuzz '^FuzzDecodeHeader$$' -fuzztime $(FUZZTIME)
	$(GO) test ./directory -run '^$$' -fuzz '^FuzzProcess$$' -fuzztime $(FUZZTIME)
	$(GO) test ./layout -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME)
	$(GO) test ./cluster -run '^$$' -fuzz '^FuzzParseControllerConfig$$' -fuzztime $(FUZZTIME)
	$(GO) test ./controller -run '^$$' -fuzz '^FuzzAPI$$' -fuzztime $(FUZZTIME)
	$(GO) test ./nodeauth -run '^$$' -fuzz '^FuzzOpen$$' -fuzztime $(FUZZTIME)

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
