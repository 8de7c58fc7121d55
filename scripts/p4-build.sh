#!/usr/bin/env bash
# p4-build.sh: compile netdir's BMv2 program (`make p4`) into p4/build/, whose
# outputs are committed: netdir.json (BMv2 config) and netdir.p4info.txtpb
# (the P4Info the controller and the model's P4Runtime server are built on);
# and, with --tofino, the TNA program into p4/build/tofino/:
# netdir.p4info.txtpb and bfrt.json (BF-RT schema).
#
#   scripts/p4-build.sh [--tofino]          compile; fail on any compiler warning
#   scripts/p4-build.sh --check [--tofino]  compile into a temp dir and fail if
#                                           p4/build differs (CI runs --check
#                                           only where p4c exists)
#
# Needs p4c's BMv2 back end, p4c-bm2-ss, on PATH (or P4C=/path/to/p4c-bm2-ss);
# p4/README.md says how it was built. --tofino needs p4c-barefoot (or
# P4C_TOFINO=...; ../shared/p4tools installs it) and takes about 40 minutes
# on 2 cores; it does not yet get through table placement (p4/README.md,
# "Tofino"), so it is not part of --check by default.
set -euo pipefail
cd "$(dirname "$0")/.."

P4C=${P4C:-p4c-bm2-ss}
P4C_TOFINO=${P4C_TOFINO:-p4c-barefoot}
# The directory sizes that fit Tofino 1 (p4/README.md, "Tofino").
TOFINO_DEFINES=(-DNETDIR_SLOTS=1024 -DNETDIR_RUNS=4 -DNETDIR_PART_RUNS=3 -DNETDIR_SCORE_ENTRIES=2048)
mode=build tofino=""
for arg in "$@"; do
	case "$arg" in
	--check) mode=check ;;
	--tofino) tofino=1 ;;
	*)
		echo "usage: $0 [--check] [--tofino]" >&2
		exit 2
		;;
	esac
done

if ! command -v "$P4C" >/dev/null 2>&1; then
	cat >&2 <<MSG
p4-build: $P4C is not on PATH, so the P4 program cannot be compiled here.
  p4c is not packaged for Debian 12: build p4c-bm2-ss from p4lang/p4c
  (tag v1.2.4.8 builds against Debian 12's protobuf and abseil; see
  p4/README.md), put it on PATH (or set P4C), and run \`make p4\` again.
  The committed p4/build/ outputs stay as they are.
MSG
	exit 1
fi

out=p4/build
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Run from the repository root with relative paths, so that the source
# locations recorded in the JSON are the same on every machine.
if ! "$P4C" --std p4-16 \
	--p4runtime-files "$tmp/netdir.p4info.txtpb" \
	-o "$tmp/netdir.json" \
	p4/v1model/netdir.p4 2>"$tmp/stderr"; then
	cat "$tmp/stderr" >&2
	echo "p4-build: p4c failed" >&2
	exit 1
fi
if [ -s "$tmp/stderr" ]; then
	cat "$tmp/stderr" >&2
	echo "p4-build: p4c printed warnings; the program must compile without any" >&2
	exit 1
fi

outputs=(netdir.json netdir.p4info.txtpb)
if [ -n "$tofino" ]; then
	if ! command -v "$P4C_TOFINO" >/dev/null 2>&1; then
		echo "p4-build: --tofino: $P4C_TOFINO is not on PATH (../shared/p4tools/install.sh installs it)" >&2
		exit 1
	fi
	# Tofino 1, TNA; the egress parser's minimum depth is Tofino 1's rule
	# for egress traffic, which netdir does not parse (egress is bypassed).
	mkdir -p "$tmp/tofino"
	if ! nice -n 10 "$P4C_TOFINO" --target tofino --arch tna --std p4-16 -D__TARGET_TOFINO__=1 \
		"${TOFINO_DEFINES[@]}" --disable-parse-min-depth-limit \
		--p4runtime-files "$tmp/tofino/netdir.p4info.txtpb" --bf-rt-schema "$tmp/tofino/bfrt.json" \
		-o "$tmp/tofino/out" p4/tna/netdir.p4 2>"$tmp/tofino-stderr"; then
		cat "$tmp/tofino-stderr" >&2
		echo "p4-build: p4c-barefoot failed" >&2
		exit 1
	fi
	if [ -s "$tmp/tofino-stderr" ]; then
		cat "$tmp/tofino-stderr" >&2
		echo "p4-build: p4c-barefoot printed warnings; the program must compile without any" >&2
		exit 1
	fi
	outputs+=(tofino/netdir.p4info.txtpb tofino/bfrt.json)
fi

case $mode in
build)
	mkdir -p "$out/tofino"
	for f in "${outputs[@]}"; do
		cp "$tmp/$f" "$out/$f"
	done
	echo "p4-build: wrote ${outputs[*]/#/$out/} ($("$P4C" --version 2>&1 | tail -1))"
	;;
check)
	stale=0
	for f in "${outputs[@]}"; do
		if ! cmp -s "$tmp/$f" "$out/$f"; then
			echo "p4-build: $out/$f is stale: run \`make p4\` and commit it" >&2
			stale=1
		fi
	done
	[ $stale = 0 ] && echo "p4-build: $out is up to date (${outputs[*]})"
	exit $stale
	;;
esac
