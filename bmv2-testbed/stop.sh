# bmv2-testbed/stop.sh PLAN: ends what start.sh started (by pid), before the
# network goes.
. "$(dirname "$0")/lib.sh"
[ -f "$work/pids" ] || exit 0
pids=$(cat "$work/pids")
alive() {
	for pid in $pids; do
		kill -0 "$pid" 2>/dev/null && return 0
	done
	return 1
}
kill $pids 2>/dev/null
for _ in $(seq 50); do
	alive || break
	sleep 0.1
done
alive && kill -9 $pids 2>/dev/null
rm -f "$work/pids"
exit 0
