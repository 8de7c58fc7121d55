#!/usr/bin/env bash
# p4-build.sh: compile netdir's BMv2 program (`make p4`) into p4/build/, whose
# outputs are committed: netdir.json (BMv2 config) and netdir.p4info.txtpb
# (the P4Info the controller and the model's P4Runtime server are built on);
# and, for Tofino, the TNA program's control-plane API into p4/build/tofino/:
# netdir.p4info.txtpb and bfrt.json (BF-RT schema).
#
#   scripts/p4-build.sh [--tofino|--tofino-api]          compile; fail on any
#                                                        compiler warning
#   scripts/p4-build.sh --check [--tofino|--tofino-api]  compile into a temp dir
#                                                        and fail if p4/build
#                                                        differs
#
# --tofino-api runs p4c-barefoot's front and mid end only (seconds): they
# write the P4Info and BF-RT schema, which do not depend on the fit, and
# check the program against the TNA rules they know. --tofino is the whole
# compile, PHV allocation and table placement included: 40 s alone on 2
# cores, up to 5 minutes beside other work; CI runs --check --tofino
# (p4/README.md, "Tofino").
# P4_TOFINO_OUT=DIR keeps --tofino's compiler output, with its resource
# logs (-g), in DIR; --tofino fails if the placement needs more MAU stages
# than the target has.
#
# Needs p4c's BMv2 back end, p4c-bm2-ss, on PATH (or P4C=/path/to/p4c-bm2-ss);
# p4/README.md says how it was built. The Tofino modes need p4c-barefoot (or
# P4C_TOFINO=...; ../shared/p4tools installs it).
set -euo pipefail
cd "$(dirname "$0")/.."

P4C=${P4C:-p4c-bm2-ss}
P4C_TOFINO=${P4C_TOFINO:-p4c-barefoot}
# The directory sizes of the Tofino 1 build (p4/README.md, "Tofino": they
# fit in 12 of 12 stages).
TOFINO_DEFINES=(-DNETDIR_SLOTS=1024 -DNETDIR_RUNS=4 -DNETDIR_PART_RUNS=3 -DNETDIR_SCORE_ENTRIES=2048)
mode=build tofino=""
for arg in "$@"; do
	case "$arg" in
	--check) mode=check ;;
	--tofino) tofino=fit ;;
	--tofino-api) tofino=api ;;
	*)
		echo "usage: $0 [--check] [--tofino|--tofino-api]" >&2
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

# Tofino 1, TNA; the egress parser's minimum depth is Tofino 1's rule for
# short egress parses (netdir's parses only the bridged header for
# non-netdir traffic).
tofino_args=(--target tofino --arch tna --std p4-16 -D__TARGET_TOFINO__=1 "${TOFINO_DEFINES[@]}"
	--disable-parse-min-depth-limit)

# tofino_fit: the whole compile, with the resource logs (-g).
tofino_fit() {
	if ! nice -n 19 "$P4C_TOFINO" "${tofino_args[@]}" -g \
		--p4runtime-files "$tmp/tofino/out/netdir.p4info.txtpb" --bf-rt-schema "$tmp/tofino/out/bfrt.json" \
		-o "$tmp/tofino/out" p4/tna/netdir.p4 >"$tmp/tofino-stdout" 2>"$tmp/tofino-stderr"; then
		cat "$tmp/tofino-stderr" >&2
		echo "p4-build: p4c-barefoot failed" >&2
		exit 1
	fi
	if [ -n "${P4_TOFINO_OUT:-}" ]; then
		mkdir -p "$P4_TOFINO_OUT"
		cp -r "$tmp/tofino/out/." "$P4_TOFINO_OUT/"
	fi
	tofino_stages "$tmp/tofino/out/pipe/logs/resources.json"
}

# tofino_stages: p4c-barefoot's open-source back end has no assembler: it
# exits 0 and writes the assembly even when table placement needs more
# MAU stages than the target has, so the fit is judged by its resource
# log (-g): one entry per stage used, and the target's stage count.
tofino_stages() {
	local used avail
	avail=$(grep -o '"nStages": *[0-9]*' "$1" | head -1 | grep -o '[0-9]*$' || true)
	used=$(grep -o '"stage_number": *[0-9]*' "$1" | sort -u | wc -l || true)
	if [ -z "$avail" ] || [ "$used" -gt "$avail" ]; then
		echo "p4-build: the Tofino program needs $used MAU stages; the target has ${avail:-unknown}" >&2
		exit 1
	fi
	echo "p4-build: the Tofino program fits in $used of $avail MAU stages"
}

# tofino_api: the front and mid end only. p4c-barefoot writes the P4Info
# and BF-RT schema before its mid end and has no option to stop after it,
# so the mid end's last pass is dumped (--top4 MidEndLast) and the compile
# is stopped as soon as that dump appears.
tofino_api() {
	local dump=$tmp/tofino/dump pid reached="" rc=0
	mkdir -p "$dump"
	nice -n 19 "$P4C_TOFINO" "${tofino_args[@]}" --top4 MidEndLast --dump "$dump" \
		--p4runtime-files "$tmp/tofino/out/netdir.p4info.txtpb" --bf-rt-schema "$tmp/tofino/out/bfrt.json" \
		-o "$tmp/tofino/out" p4/tna/netdir.p4 >/dev/null 2>"$tmp/tofino-stderr" &
	pid=$!
	while kill -0 "$pid" 2>/dev/null; do
		if compgen -G "$dump/*MidEndLast*" >/dev/null; then
			reached=1
			kill "$pid" 2>/dev/null || true
			break
		fi
		sleep 0.2
	done
	wait "$pid" || rc=$?
	if [ -z "$reached" ] && [ "$rc" != 0 ]; then
		cat "$tmp/tofino-stderr" >&2
		echo "p4-build: p4c-barefoot's front or mid end failed" >&2
		exit 1
	fi
}

# sort_p4info_instances: p4c-barefoot lists the Snapshot extern's two
# instances (ingress, egress) in either order from run to run, so every
# extern's instances are written sorted by id. mawk has no sort: an
# insertion sort of each extern's instance blocks.
sort_p4info_instances() {
	awk '
	function flush(i, j, b, k) {
		for (i = 2; i <= n; i++) {
			b = blk[i]
			k = key[i]
			for (j = i - 1; j >= 1 && key[j] > k; j--) {
				blk[j + 1] = blk[j]
				key[j + 1] = key[j]
			}
			blk[j + 1] = b
			key[j + 1] = k
		}
		for (i = 1; i <= n; i++)
			printf "%s", blk[i]
		n = 0
	}
	$0 == "  instances {" { blk[++n] = $0 "\n"; key[n] = -1; inside = 1; next }
	inside {
		blk[n] = blk[n] $0 "\n"
		if (key[n] < 0 && $1 == "id:") key[n] = $2 + 0
		if ($0 == "  }") inside = 0
		next
	}
	n > 0 { flush() }
	{ print }
	END { if (n > 0) flush() }
	'
}

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
	mkdir -p "$tmp/tofino/out"
	if [ "$tofino" = fit ]; then
		tofino_fit
	else
		tofino_api
	fi
	# A whole compile that passes prints one empty line on stderr.
	if grep -q '[^[:space:]]' "$tmp/tofino-stderr"; then
		cat "$tmp/tofino-stderr" >&2
		echo "p4-build: p4c-barefoot printed warnings; the program must compile without any" >&2
		exit 1
	fi
	sort_p4info_instances <"$tmp/tofino/out/netdir.p4info.txtpb" >"$tmp/tofino/netdir.p4info.txtpb"
	outputs+=(tofino/netdir.p4info.txtpb)
	# The BF-RT schema is written, not checked: p4c-barefoot lists the two
	# Snapshot tables in either order and gives the snapshot config table
	# the id of whichever comes first, so no two runs need agree. The
	# controller speaks P4Runtime, whose P4Info --check compares.
	if [ "$mode" = build ]; then
		cp "$tmp/tofino/out/bfrt.json" "$tmp/tofino/bfrt.json"
		outputs+=(tofino/bfrt.json)
	fi
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
