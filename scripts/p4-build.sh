#!/usr/bin/env bash
# p4-build.sh: compile netdir's BMv2 program (`make p4`) into p4/build/, whose
# outputs are committed: netdir.json (BMv2 config) and netdir.p4info.txtpb
# (the P4Info the controller and the model's P4Runtime server are built on).
#
#   scripts/p4-build.sh          compile; fail on any compiler warning
#   scripts/p4-build.sh --check  compile into a temp dir and fail if p4/build
#                                differs (CI runs this only where p4c exists)
#
# Needs p4c's BMv2 back end, p4c-bm2-ss, on PATH (or P4C=/path/to/p4c-bm2-ss);
# p4/README.md says how it was built. The TNA program (p4/tna) needs Intel's
# bf-p4c and is not built here.
set -euo pipefail
cd "$(dirname "$0")/.."

P4C=${P4C:-p4c-bm2-ss}
mode=build
case "${1:-}" in
--check) mode=check ;;
"") ;;
*)
	echo "usage: $0 [--check]" >&2
	exit 2
	;;
esac

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

case $mode in
build)
	mkdir -p "$out"
	cp "$tmp/netdir.json" "$tmp/netdir.p4info.txtpb" "$out/"
	echo "p4-build: wrote $out/netdir.json and $out/netdir.p4info.txtpb ($("$P4C" --version 2>&1 | tail -1))"
	;;
check)
	stale=0
	for f in netdir.json netdir.p4info.txtpb; do
		if ! cmp -s "$tmp/$f" "$out/$f"; then
			echo "p4-build: $out/$f is stale: run \`make p4\` and commit it" >&2
			stale=1
		fi
	done
	[ $stale = 0 ] && echo "p4-build: $out is up to date"
	exit $stale
	;;
esac
