# bmv2-testbed/bench.sh PLAN: a short `netdir bench` through BMv2 (run.sh
# --bench runs it): from client c2, which has no agent, so every request
# crosses the switch, to the fabric's service address; the controller's API
# over the management network sets up each policy (static: its loops paused,
# every key evicted, every partition on its chain head; netdir: its loops
# running). The results go to $work/bench.{json,html}.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
mx c2 "$work/netdir" bench --service "$(q 'p["service"]')" --controller "$(q 'p["controller"]["mgmt"]'):7400" \
	--capacity "$NETDIR_MAX_OPS" ${NETDIR_BENCH_ARGS:-} \
	--json "$work/bench.json" --html "$work/bench.html" --live lines
