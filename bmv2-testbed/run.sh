#!/usr/bin/env bash
# bmv2-testbed/run.sh: netdir on a Mininet network with one BMv2 switch.
#
#   sudo bmv2-testbed/run.sh [--storage N] [--clients K] [--no-cli] [--smoke | --bench]
#
# Needs root, Debian's mininet package (for /usr/bin/python3), simple_switch_grpc
# (BMv2 built with PI; p4/README.md), ethtool, curl, and Go to build netdir.
# topo.py builds the network (N storage hosts, default 6; K clients, default 2;
# a controller host; the BMv2 switch; a management network), then start.sh
# starts:
#   - `netdir node` on every storage host (Pebble under /tmp/netdir-testbed),
#     reporting to the controller and gossiping over the management network,
#   - `netdir controller` on the controller host, which pushes
#     p4/build/netdir.{json,p4info.txtpb} to the switch over P4Runtime and
#     installs partitions, node addresses, static /32 routes to every host and
#     the VSB multicast group (all again after a reconnect),
#   - `netdir agent` (eBPF, host mode) on c1, beside the switch,
# and opens the Mininet CLI. Clients send to the service address
# 10.0.0.254:7420, e.g. from the CLI:
#   mininet> c2 /tmp/netdir-testbed/netdir get KEY --service 10.0.0.254:7420 --repeat 100
# Everything it starts is stopped when the CLI exits.
#   --smoke  runs the smoke checks (bmv2-testbed/smoke) instead of the CLI and
#            exits non-zero if one fails.
#   --bench  runs a short `netdir bench --service` (static, then netdir)
#            from c2 through BMv2 instead (bench.sh), the nodes capped at
#            --max-ops ops/s each (default 50, which BMv2 carries),
#            and writes /tmp/netdir-testbed/bench.{json,html};
#            NETDIR_BENCH_ARGS adds netdir bench flags (default: a
#            minute in all, open loop at 60% of the nodes' capacity).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
work=/tmp/netdir-testbed
storage=6 clients=2 nocli="" then=() bench="" maxops=50
usage() { echo "usage: $0 [--storage N] [--clients K] [--no-cli] [--smoke | --bench [--max-ops N]]" >&2; exit 2; }
while [ $# -gt 0 ]; do
	case $1 in
	--storage) storage=$2; shift 2 ;;
	--clients) clients=$2; shift 2 ;;
	--no-cli) nocli=--no-cli; shift ;;
	--smoke) then=(--exec "$here/smoke.sh") nocli=--no-cli; shift ;;
	--bench) then=(--exec "$here/bench.sh") nocli=--no-cli bench=1; shift ;;
	--max-ops) maxops=$2; shift 2 ;;
	*) usage ;;
	esac
done

[ "$(id -u)" = 0 ] || { echo "run.sh: needs root (Mininet)" >&2; exit 1; }
# Debian's mininet package installs into the system Python.
export PY=${PYTHON:-/usr/bin/python3}
"$PY" -c 'import mininet.net' 2>/dev/null || { echo "run.sh: apt-get install mininet (for $PY)" >&2; exit 1; }
for b in simple_switch_grpc nsenter ethtool curl; do
	command -v $b >/dev/null || { echo "run.sh: $b not on PATH (p4/README.md: building BMv2)" >&2; exit 1; }
done
for f in netdir.json netdir.p4info.txtpb; do
	[ -f "$root/p4/build/$f" ] || { echo "run.sh: p4/build/$f missing: make p4" >&2; exit 1; }
done

mkdir -p "$work"
(cd "$root" && go build -o "$work/netdir" ./cmd/netdir && go build -o "$work/smoke" ./bmv2-testbed/smoke)

export NETDIR_ROOT=$root
if [ -n "$bench" ]; then
	export NETDIR_MAX_OPS=$maxops
	export NETDIR_BENCH_ARGS=${NETDIR_BENCH_ARGS:-"--keys 1000 --workload B --zipf 0.99 --warmup 10s --duration 20s
		--rate $((storage * maxops * 6 / 10)) --concurrency 64"}
fi
# If topo.py dies without running stop.sh, end what start.sh started.
trap '[ -f "$work/plan.json" ] && bash "$here/stop.sh" "$work/plan.json"' EXIT
rm -f "$work/plan.json"
"$PY" "$here/topo.py" --storage "$storage" --clients "$clients" --json "$root/p4/build/netdir.json" \
	--plan "$work/plan.json" --exec "$here/start.sh" "${then[@]}" --stop "$here/stop.sh" $nocli
