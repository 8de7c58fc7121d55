#!/usr/bin/env bash
# peer-bench.sh: netdir's storage node beside redis-server on this machine,
# in one run, as GETs per CPU-second of the server process alone:
#   - netdir: BenchmarkNodeGetProcess (storagenode/bench_test.go), a
#     `netdir node` process, R=1, 10k keys of 100 B;
#   - redis-server (Debian's): redis-benchmark GET over 10k keys of 100 B,
#     16 clients, unpipelined (-P 1) and pipelined (-P 32).
# Both read the server's CPU time from /proc/PID/stat. Prints a table and
# the ratios; exits non-zero on any failure.
#
# Environment: ROUNDS (default 1) repeats the three measurements back to
# back; NODE_GETS (300000), REDIS_P1_GETS (300000), REDIS_P32_GETS (3000000)
# size them; REDIS_PORT (default: a free loopback port).
set -euo pipefail

cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-1}
NODE_GETS=${NODE_GETS:-300000}
REDIS_P1_GETS=${REDIS_P1_GETS:-300000}
REDIS_P32_GETS=${REDIS_P32_GETS:-3000000}
KEYS=10000
CLIENTS=16
HZ=$(getconf CLK_TCK)

die() { echo "peer-bench: $*" >&2; exit 1; }

need_redis() {
	local missing=()
	command -v redis-server >/dev/null || missing+=(redis-server)
	command -v redis-benchmark >/dev/null || missing+=(redis-tools)
	command -v redis-cli >/dev/null || missing+=(redis-tools)
	[ ${#missing[@]} -eq 0 ] && return
	if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
		echo "peer-bench: installing ${missing[*]}" >&2
		DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends redis-server redis-tools >&2 ||
			die "apt-get install redis-server redis-tools failed"
	else
		die "missing ${missing[*]}: install Debian's redis-server and redis-tools (apt-get install redis-server redis-tools, as root)"
	fi
}

# cpu_ticks PID: user+system clock ticks of PID (fields 14 and 15 of stat,
# counted after the command name, which may hold spaces).
cpu_ticks() {
	local s
	s=$(cat "/proc/$1/stat") || die "process $1 is gone"
	s=${s##*) }
	awk '{print $12 + $13}' <<<"$s"
}

free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null ||
		echo $((20000 + RANDOM % 20000))
}

REDIS_PID=
REDIS_WRAP=
cleanup() {
	if [ -n "$REDIS_WRAP" ]; then
		kill "$REDIS_WRAP" 2>/dev/null || true
		wait "$REDIS_WRAP" 2>/dev/null || true
	fi
}
trap cleanup EXIT

start_redis() {
	PORT=${REDIS_PORT:-$(free_port)}
	# Bounded in time: timeout ends the server even if this script is killed.
	timeout 1800 redis-server --bind 127.0.0.1 --port "$PORT" --save '' --appendonly no \
		--daemonize no --logfile /dev/null >/dev/null 2>&1 &
	REDIS_WRAP=$!
	for _ in $(seq 100); do
		redis-cli -p "$PORT" ping >/dev/null 2>&1 && break
		sleep 0.1
	done
	redis-cli -p "$PORT" ping >/dev/null 2>&1 || die "redis-server did not start on port $PORT"
	REDIS_PID=$(redis-cli -p "$PORT" info server | awk -F: '/^process_id:/ {print $2}' | tr -d '\r')
	[ -n "$REDIS_PID" ] || die "no redis-server pid"
	# 10k keys of 100 B, named as redis-benchmark's -r draws them
	# (key:%012d), loaded through the protocol in one pipe.
	local val
	val=$(head -c 100 /dev/zero | tr '\0' v)
	awk -v n=$KEYS -v v="$val" 'BEGIN {
		for (i = 0; i < n; i++) {
			k = sprintf("key:%012d", i)
			printf "*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n", length(k), k, length(v), v
		}
	}' | redis-cli -p "$PORT" --pipe >/dev/null || die "preloading redis failed"
	local n
	n=$(redis-cli -p "$PORT" dbsize | tr -d '\r')
	[ "$n" = "$KEYS" ] || die "redis holds $n keys, want $KEYS"
}

# redis_get P N: GETs per redis-server CPU-second for N GETs at pipeline P.
redis_get() {
	local p=$1 n=$2 t0 t1
	t0=$(cpu_ticks "$REDIS_PID")
	redis-benchmark -h 127.0.0.1 -p "$PORT" -t get -n "$n" -r $KEYS -d 100 -c $CLIENTS -P "$p" -q >/dev/null ||
		die "redis-benchmark -P $p failed"
	t1=$(cpu_ticks "$REDIS_PID")
	[ "$t1" -gt "$t0" ] || die "redis-server used no CPU time"
	awk -v n="$n" -v d=$((t1 - t0)) -v hz="$HZ" 'BEGIN {printf "%.0f", n * hz / d}'
}

# node_get: GETs per netdir node CPU-second (BenchmarkNodeGetProcess).
node_get() {
	local out v
	out=$(go test -run '^$' -bench '^BenchmarkNodeGetProcess$' -benchtime "${NODE_GETS}x" ./storagenode 2>&1) ||
		die "BenchmarkNodeGetProcess failed:
$out"
	v=$(awk '{for (i = 2; i <= NF; i++) if ($i == "ops/node-cpu-s") print $(i-1)}' <<<"$out" | tail -1)
	[ -n "$v" ] || die "no ops/node-cpu-s in:
$out"
	printf "%.0f" "$v"
}

need_redis
start_redis

printf "%-5s %14s %14s %14s %12s %12s\n" round "netdir-node" "redis-P1" "redis-P32" "node/P1" "node/P32"
for r in $(seq "$ROUNDS"); do
	node=$(node_get)
	p1=$(redis_get 1 "$REDIS_P1_GETS")
	p32=$(redis_get 32 "$REDIS_P32_GETS")
	awk -v r="$r" -v a="$node" -v b="$p1" -v c="$p32" 'BEGIN {
		printf "%-5s %14d %14d %14d %11.2fx %11.2fx\n", r, a, b, c, a / b, a / c
	}'
done
echo "(GETs per server CPU-second; 100 B values, $KEYS keys; redis: $CLIENTS clients, $(redis-server --version | awk '{print $3}'); load average $(cut -d' ' -f1-3 /proc/loadavg))"
