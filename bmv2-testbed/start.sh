# bmv2-testbed/start.sh PLAN: starts netdir on the testbed topo.py built
# (run.sh runs it): a storage node on every storage host, the controller on
# the controller host, and the eBPF agent (host mode) on client c1.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
rm -f "$work/pids"
ctl=$(q 'p["controller"]["mgmt"]')
replicas=$(q 'min(3, len(p["nodes"]))')

# The cluster layout (ring placement), which every node reads and the
# controller's configuration ends with: VSBs go to the switch, and the switch
# reaches each node on its port, rewriting the MAC.
{
	echo "epoch: 1"
	echo "partition_bits: 10"
	echo "replicas: $replicas"
	echo "dataplane: $(q 'p["service"]')"
	echo "nodes:"
	q '"\n".join("  - {id: %d, addr: \"%s:7420\", port: %d, mac: \"%s\"}" % (n["id"], n["ip"], n["port"], n["mac"]) for n in p["nodes"])'
} >"$work/layout.yaml"

# Storage nodes serve on the data network, and report to the controller and
# gossip on the management network.
for id in $(q '" ".join(str(n["id"]) for n in p["nodes"])'); do
	ip=$(q "[n['ip'] for n in p['nodes'] if n['id'] == $id][0]")
	mgmt=$(q "[n['mgmt'] for n in p['nodes'] if n['id'] == $id][0]")
	rm -rf "$work/node$id"
	mkdir -p "$work/node$id"
	start "n$id" "node$id" "$work/netdir" node --id "$id" --data "$work/node$id" --config "$work/layout.yaml" \
		--listen "$ip:7420" --controller "$ctl:7400" --gossip "$mgmt:7946" --gossip-seeds "$ctl:7946" \
		--max-ops "${NETDIR_MAX_OPS:-0}"
done

# The controller: the switch's P4Runtime over the management network, the
# nodes' operations over the data network (through the switch). Short rounds
# and epochs, so that the smoke sees promotion and the coarse weights soon.
{
	echo "api: 0.0.0.0:7400"
	echo "metrics: $ctl:9400"
	echo "round: 500ms"
	echo "coarse_epoch: 5s"
	# run.sh --bench: the nodes' emulated capacity, and a key hot at 0.5%
	# of the cluster's capacity per round (as in the in-process bench).
	if [ "${NETDIR_MAX_OPS:-0}" != 0 ]; then
		echo "node_capacity: $NETDIR_MAX_OPS"
		echo "promote_min: $(q "max(2, round(0.005 * len(p['nodes']) * $NETDIR_MAX_OPS * 0.5))")"
	fi
	echo "p4info: $NETDIR_ROOT/p4/build/netdir.p4info.txtpb"
	echo "switches:"
	echo "  - {name: s1, addr: $(q 'p["switch"]["grpc"]'), device_id: $(q 'p["switch"]["device_id"]'), election_id: 1,"
	echo "     device_config: $NETDIR_ROOT/p4/build/netdir.json, window_ns: 1000000,"
	echo "     routes: ["
	q '",\n".join("       {prefix: %s/32, port: %d, smac: \"%s\", dmac: \"%s\"}" % (h["ip"], h["port"], p["switch"]["mac"], h["mac"]) for h in p["nodes"] + p["clients"] + [p["controller"]])'
	echo "     ]}"
	echo "vsb_ports: [$(q '", ".join(str(c["port"]) for c in p["clients"])')]"
	cat "$work/layout.yaml"
} >"$work/controller.yaml"
start ctl controller "$work/netdir" controller --config "$work/controller.yaml" --gossip "$ctl:7946"
await "the controller (see $work/controller.log)" mx ctl "$work/netdir" ctl --controller 127.0.0.1:7400 status

# The eBPF agent in host mode on c1, beside the switch: c1's clients send to
# the fabric's service address, which the agent's TC program routes; the
# switch's VSB group reaches its XDP program.
c1=$(q '[c["mgmt"] for c in p["clients"] if c["host"] == "c1"][0]')
start c1 agent-c1 "$work/netdir" agent --iface c1-eth0 --controller "$ctl:7400" --service "$(q 'p["service"]')" \
	--no-service-route --metrics "$c1:9475"
synced() { mx ctl curl -sf "http://$c1:9475/metrics" | grep -q '^netdir_agent_synced 1'; }
await "the agent on c1 (see $work/agent-c1.log)" synced
echo "testbed: $(q 'len(p["nodes"])') nodes, the controller and the agent on c1 started; logs in $work"
