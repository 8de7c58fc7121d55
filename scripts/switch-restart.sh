#!/usr/bin/env bash
# switch-restart.sh: the README's "Kill any one process" switch restart,
# timed. It builds netdir and starts the README's cluster on loopback ports
# of its own (base PORT, default 17000: the data plane on PORT+420, nodes on
# PORT+501.., the controller's API on PORT+400, gossip on PORT+946, the
# switch's P4Runtime on PORT+2559): three nodes, the model switch, one
# controller, 1024 partitions, `hot` pinned. Then, RUNS times (default 3),
# it kills the switch with -9, waits 0.5 s, starts it again and retries a
# put of `hot` (a new `netdir put` with a 50 ms timeout each time) until it
# is acknowledged, and prints the time from the switch's start (the exec)
# and from its return (its log's "P4Runtime serving": the process's start-up
# is not in it). It ends with the controller's re-sync log lines. Exits
# non-zero if a put is never acknowledged within 30 s.
set -euo pipefail

cd "$(dirname "$0")/.."
RUNS=${RUNS:-3}
PORT=${PORT:-17000}
W=$(mktemp -d)
ND=$W/netdir
go build -o "$ND" ./cmd/netdir

dp=127.0.0.1:$((PORT + 420))
api=127.0.0.1:$((PORT + 400))
gossip=127.0.0.1:$((PORT + 946))
p4rt=127.0.0.1:$((PORT + 2559))
cat >"$W/layout.yaml" <<EOF
epoch: 1
partition_bits: 10
replicas: 3
dataplane: $dp
nodes:
  - {id: 1, addr: 127.0.0.1:$((PORT + 501))}
  - {id: 2, addr: 127.0.0.1:$((PORT + 502))}
  - {id: 3, addr: 127.0.0.1:$((PORT + 503))}
EOF
cat - "$W/layout.yaml" >"$W/controller.yaml" <<EOF
api: $api
metrics: ""
p4info: $PWD/p4/build/netdir.p4info.txtpb
switches:
  - {name: model, addr: $p4rt, device_id: 1, election_id: 1}
EOF

pids=()
cleanup() {
	for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$W"
}
trap cleanup EXIT
now_ms() { echo $(($(date +%s%N) / 1000000)); }
start_switch() {
	"$ND" switch --nodes "$W/layout.yaml" --listen "$dp" --p4runtime "$p4rt" >"$W/switch.log" 2>&1 &
	sw=$!
	pids+=("$sw")
}

start_switch
sleep 0.5
"$ND" controller --config "$W/controller.yaml" --gossip "$gossip" >"$W/controller.log" 2>&1 &
pids+=($!)
sleep 1
for i in 1 2 3; do
	"$ND" node --controller "$api" --id "$i" --data "$W/nd$i" --gossip-seeds "$gossip" >"$W/node$i.log" 2>&1 &
	pids+=($!)
done
sleep 2
"$ND" put --service "$dp" hot v0 >/dev/null
"$ND" ctl --controller "$api" pin hot >/dev/null
sleep 1

for run in $(seq "$RUNS"); do
	kill -9 "$sw"
	wait "$sw" 2>/dev/null || true
	sleep 0.5
	start=$(now_ms)
	start_switch
	until "$ND" put --service "$dp" --timeout 50ms hot "v$run" >/dev/null 2>&1; do
		if (($(now_ms) - start > 30000)); then
			echo "switch-restart: run $run: no ack within 30 s" >&2
			exit 1
		fi
	done
	acked=$(now_ms)
	serving=$(sed -n 's/^time=\([^ ]*\) .*msg="P4Runtime serving".*/\1/p' "$W/switch.log")
	back=$(($(date -d "$serving" +%s%N) / 1000000))
	echo "run $run: put of hot acknowledged $((acked - start)) ms after the switch's start, $((acked - back)) ms after its return"
	sleep 3
done
grep -E "data plane re-synced" "$W/controller.log" | tail -n "$RUNS"
