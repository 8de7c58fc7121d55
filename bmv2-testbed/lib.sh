# bmv2-testbed/lib.sh: what the scripts topo.py runs share. They get the
# address plan (plan.json, written by topo.py) as $1; the work directory is
# the plan's.
plan=$1
work=$(dirname "$plan")
PY=${PY:-/usr/bin/python3}

# q EXPR prints a Python expression over the plan, p.
q() { "$PY" -c "import json; p=json.load(open('$plan')); print($1)"; }

# pid_of HOST: a process in HOST's namespaces (the switch, s1, too).
pid_of() {
	q "[h['pid'] for h in p['nodes'] + p['clients'] + [p['controller'], dict(p['switch'], host='s1')] if h['host'] == '$1'][0]"
}

# mx HOST CMD...: run CMD in HOST's network namespace.
mx() {
	local h=$1
	shift
	nsenter -t "$(pid_of "$h")" -n "$@"
}

# start HOST NAME CMD...: run CMD in HOST's network namespace in the
# background, its output in $work/NAME.log and its pid in $work/NAME.pid and
# $work/pids (stop.sh ends them). nsenter execs CMD, so the pid is CMD's.
start() {
	local h=$1 name=$2
	shift 2
	nsenter -t "$(pid_of "$h")" -n "$@" >"$work/$name.log" 2>&1 &
	echo $! >"$work/$name.pid"
	echo $! >>"$work/pids"
}

# await WHAT CMD...: retry CMD for up to 20 s; fail naming WHAT.
await() {
	local what=$1
	shift
	for _ in $(seq 100); do
		"$@" >/dev/null 2>&1 && return 0
		sleep 0.2
	done
	echo "testbed: $what: not ready after 20 s" >&2
	return 1
}
