#!/usr/bin/env bash
# bmv2-testbed/run.sh: netdir on a Mininet network with one BMv2 switch.
#
#   sudo bmv2-testbed/run.sh [--storage N] [--clients K] [--no-cli] [--smoke]
#
# Needs root, Debian's mininet package, simple_switch_grpc (BMv2 built with PI;
# see p4/README.md), ethtool (hosts' checksum offload must be off: BMv2 forwards veth frames
# with the partial checksums offload leaves), and Go to build netdir. It builds the topology (topo.py), then starts:
#   - `netdir node` on every storage host (Pebble under /tmp/netdir-testbed),
#     reporting the keys it serves to the controller (hot-key promotion),
#   - `netdir controller` in the root namespace (management address
#     10.100.0.254, API :7400), which pushes p4/build/netdir.{json,p4info.txtpb}
#     to the switch over P4Runtime and installs partitions, node addresses,
#     static /32 routes to every host and the VSB multicast group (all again
#     after a reconnect),
# and opens the Mininet CLI. Clients send to the service address
# 10.0.0.254:7420, e.g. from the CLI:
#   mininet> c1 /tmp/netdir-testbed/netdir bench --target 10.0.0.254:7420
# Everything it starts is stopped when the CLI exits. --smoke instead puts a
# key and reads it 20 times from c1 through the switch, then exits.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
work=/tmp/netdir-testbed
storage=3 clients=2 nocli="" smoke=""
while [ $# -gt 0 ]; do
	case $1 in
	--storage) storage=$2; shift 2 ;;
	--clients) clients=$2; shift 2 ;;
	--no-cli) nocli=--no-cli; shift ;;
	--smoke) smoke=1 nocli=--no-cli; shift ;;
	*) echo "usage: $0 [--storage N] [--clients K] [--no-cli] [--smoke]" >&2; exit 2 ;;
	esac
done

[ "$(id -u)" = 0 ] || { echo "run.sh: needs root (Mininet)" >&2; exit 1; }
# Debian's mininet package installs into the system Python.
PY=${PYTHON:-/usr/bin/python3}
"$PY" -c 'import mininet.net' 2>/dev/null || { echo "run.sh: apt-get install mininet (for $PY)" >&2; exit 1; }
for b in simple_switch_grpc nsenter ethtool; do
	command -v $b >/dev/null || { echo "run.sh: $b not on PATH (p4/README.md: building BMv2)" >&2; exit 1; }
done
for f in netdir.json netdir.p4info.txtpb; do
	[ -f "$root/p4/build/$f" ] || { echo "run.sh: p4/build/$f missing: make p4" >&2; exit 1; }
done

mkdir -p "$work"
(cd "$root" && go build -o "$work/netdir" ./cmd/netdir)

# The script topo.py runs once the network is up: $1 is the address plan.
cat >"$work/start.sh" <<'SCRIPT'
set -euo pipefail
plan=$1 work=$(dirname "$1")
pid_of() { for kv in $NETDIR_HOST_PIDS; do [ "${kv%%=*}" = "$1" ] && echo "${kv#*=}"; done; }
mx() { local h=$1; shift; nsenter -t "$(pid_of "$h")" -n "$@"; }
py() { "$PY" -c "import json,sys; p=json.load(open('$plan')); $1"; }

# Storage nodes: the layout file every node reads (ring placement, R=3).
{
	echo "epoch: 1"
	echo "partition_bits: 10"
	echo "replicas: $(py 'print(min(3, len(p["nodes"])))')"
	echo "dataplane: $(py 'print(p["service"])')"
	echo "nodes:"
	py 'print("\n".join("  - {id: %d, addr: %s:7420}" % (n["id"], n["ip"]) for n in p["nodes"]))'
} >"$work/layout.yaml"
for id in $(py 'print(" ".join(str(n["id"]) for n in p["nodes"]))'); do
	ip=$(py "print([n['ip'] for n in p['nodes'] if n['id'] == $id][0])")
	rm -rf "$work/node$id"; mkdir -p "$work/node$id"
	# nsenter itself in the background: it execs netdir, so $! is the node.
	nsenter -t "$(pid_of "n$id")" -n "$work/netdir" node --id "$id" --data "$work/node$id" \
		--config "$work/layout.yaml" --listen "$ip:7420" \
		--controller "$(py 'print(p["controller"])'):7400" >"$work/node$id.log" 2>&1 &
	echo $! >>"$work/pids"
done

# The controller, in the root namespace: switch over P4Runtime, nodes over
# the management network (netdir controller --config, see its --help).
{
	echo "api: $(py 'print(p["controller"])'):7400"
	echo "partition_bits: 10"
	echo "replicas: $(py 'print(min(3, len(p["nodes"])))')"
	echo "p4info: $NETDIR_ROOT/p4/build/netdir.p4info.txtpb"
	echo "switches:"
	echo "  - {name: s1, addr: $(py 'print(p["switch"]["grpc"])'), device_id: 1, election_id: 1,"
	echo "     device_config: $NETDIR_ROOT/p4/build/netdir.json, window_ns: 1000000,"
	echo "     routes: ["
	py 'print(",\n".join("       {prefix: %s/32, port: %d, smac: \"%s\", dmac: \"%s\"}" % (h["ip"], h["port"], p["switch"]["mac"], h["mac"]) for h in p["nodes"] + p["clients"]))'
	echo "     ]}"
	echo "nodes:"
	py 'print("\n".join("  - {id: %d, addr: \"%s:7420\", port: %d, mac: \"%s\"}" % (n["id"], n["ip"], n["port"], n["mac"]) for n in p["nodes"]))'
	echo "vsb_ports: [$(py 'print(", ".join(str(c["port"]) for c in p["clients"]))')]"
} >"$work/controller.yaml"
"$work/netdir" controller --config "$work/controller.yaml" >"$work/controller.log" 2>&1 &
echo $! >>"$work/pids"
# Wait until the controller has programmed the switch.
for _ in $(seq 100); do
	"$work/netdir" ctl --controller "$(py 'print(p["controller"])'):7400" status >/dev/null 2>&1 && break
	sleep 0.2
done
echo "netdir: nodes and controller started; logs in $work"
SCRIPT

# --smoke: a write and reads from c1 through the switch, then exit.
cat >"$work/smoke.sh" <<'SCRIPT'
set -euo pipefail
pid_of() { for kv in $NETDIR_HOST_PIDS; do [ "${kv%%=*}" = "$1" ] && echo "${kv#*=}"; done; }
mx() { local h=$1; shift; nsenter -t "$(pid_of "$h")" -n "$@"; }
work=$(dirname "$1")
mx c1 "$work/netdir" put smoke-key smoke-value --service 10.0.0.254:7420
mx c1 "$work/netdir" get smoke-key --service 10.0.0.254:7420 --repeat 20
# A hot key: enough reads for the controller to promote it, then the
# directory as the controller sees it.
mx c1 "$work/netdir" get smoke-key --service 10.0.0.254:7420 --repeat 2000 >/dev/null
sleep 2
"$work/netdir" ctl --controller 10.100.0.254:7400 pin smoke-key || true
"$work/netdir" ctl --controller 10.100.0.254:7400 dir
mx c1 "$work/netdir" get smoke-key --service 10.0.0.254:7420 --repeat 20
SCRIPT
then=""
[ -n "$smoke" ] && then="--then $work/smoke.sh"

rm -f "$work/pids"
cleanup() {
	if [ -f "$work/pids" ]; then
		while read -r pid; do kill "$pid" 2>/dev/null || true; done <"$work/pids"
		rm -f "$work/pids"
	fi
}
trap cleanup EXIT
NETDIR_ROOT=$root PY=$PY "$PY" "$here/topo.py" --storage "$storage" --clients "$clients" \
	--json "$root/p4/build/netdir.json" --plan "$work/plan.json" --exec "$work/start.sh" $then $nocli
