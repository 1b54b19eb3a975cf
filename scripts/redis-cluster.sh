#!/usr/bin/env bash
# A throw-away Redis Cluster for the tests: 3 masters, no replicas, on loopback.
#
#   scripts/redis-cluster.sh start    start it (reuses a healthy cluster already on the ports)
#   scripts/redis-cluster.sh stop     shut the nodes down and remove their folder
#   scripts/redis-cluster.sh status   exit 0 if a healthy cluster answers on the ports
#   scripts/redis-cluster.sh url      print redis://127.0.0.1:7301,127.0.0.1:7302,127.0.0.1:7303
#
# Environment:
#   REDIS_CLUSTER_PORTS     ports of the nodes, space or comma separated (default "7301 7302 7303")
#   WAITROOM_WAIT_SECONDS   how long to wait for nodes and for cluster_state:ok (default 30)
#
# Node folders, logs and pid files are under ${TMPDIR:-/tmp}/waitroom-redis-cluster. Nothing is
# persisted (--save "" --appendonly no). Quiet on success; on failure the node logs are printed.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=scripts/services.sh
source "$here/services.sh"

read -r -a ports <<<"${REDIS_CLUSTER_PORTS:-7301 7302 7303}"
if [ "${#ports[@]}" -eq 1 ] && [[ ${ports[0]} == *,* ]]; then
	IFS=, read -r -a ports <<<"${ports[0]}"
fi
for p in "${ports[@]}"; do
	if ! [[ $p =~ ^[0-9]+$ ]] || [ "$p" -lt 1 ] || [ "$p" -gt 55535 ]; then
		echo "redis-cluster.sh: bad port '$p' in REDIS_CLUSTER_PORTS (cluster bus uses port+10000)" >&2
		exit 2
	fi
done
if [ "${#ports[@]}" -lt 3 ]; then
	echo "redis-cluster.sh: a cluster needs at least 3 masters, got ports: ${ports[*]}" >&2
	exit 2
fi
dir="${TMPDIR:-/tmp}/waitroom-redis-cluster"
wait_s=${WAITROOM_WAIT_SECONDS:-30}

err() { printf 'redis-cluster.sh: %s\n' "$*" >&2; }

rcli() { # rcli PORT ARGS...
	local port=$1
	shift
	timeout 5 redis-cli -h 127.0.0.1 -p "$port" "$@"
}

# cluster_info PORT FIELD: one field of CLUSTER INFO.
cluster_info() {
	rcli "$1" cluster info 2>/dev/null | tr -d '\r' | sed -n "s/^$2://p"
}

# node_ok PORT: the node answers, is in cluster_state:ok and knows exactly our nodes.
node_ok() {
	local port=$1 nodes
	[ "$(cluster_info "$port" cluster_state)" = ok ] || return 1
	[ "$(cluster_info "$port" cluster_known_nodes)" = "${#ports[@]}" ] || return 1
	nodes=$(rcli "$port" cluster nodes 2>/dev/null) || return 1
	for q in "${ports[@]}"; do
		[[ $nodes == *":$q@"* ]] || return 1
	done
}

healthy() {
	command -v redis-cli >/dev/null 2>&1 || return 1
	for p in "${ports[@]}"; do
		node_ok "$p" || return 1
	done
}

url() {
	local out="" p
	for p in "${ports[@]}"; do
		out+="${out:+,}127.0.0.1:$p"
	done
	printf 'redis://%s\n' "$out"
}

dump_logs() {
	local p
	for p in "${ports[@]}"; do
		if [ -f "$dir/$p/redis.log" ]; then
			err "--- tail of $dir/$p/redis.log"
			tail -n 20 "$dir/$p/redis.log" | sed 's/^/    /' >&2
		fi
	done
}

port_closed() { ! _svc_tcp_open "$1"; }

# stop_nodes: shuts down the cluster nodes on our ports (only Redis nodes with cluster
# enabled, or started from our folder) and removes the folder.
stop_nodes() {
	local p pid stopping=()
	for p in "${ports[@]}"; do
		if command -v redis-cli >/dev/null 2>&1 && _svc_redis_ping "$p"; then
			if rcli "$p" info cluster 2>/dev/null | tr -d '\r' | grep -qx 'cluster_enabled:1'; then
				rcli "$p" shutdown nosave >/dev/null 2>&1 || true
				stopping+=("$p")
			else
				err "port $p is a Redis without cluster mode, not ours: left running"
				continue
			fi
		fi
		# A node that hangs (or has no redis-cli to talk to): its pid file, if it is ours.
		if [ -f "$dir/$p/redis.pid" ]; then
			pid=$(cat "$dir/$p/redis.pid" 2>/dev/null || true)
			if [[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null &&
				grep -q redis-server "/proc/$pid/cmdline" 2>/dev/null; then
				kill "$pid" 2>/dev/null || true
				stopping+=("$p")
			fi
		fi
	done
	for p in "${stopping[@]}"; do
		if ! _svc_wait "$wait_s" port_closed "$p"; then
			err "port $p still open ${wait_s}s after shutdown"
			return 1
		fi
	done
	rm -rf "$dir"
}

start() {
	local p addrs=() out
	if healthy; then
		return 0
	fi
	ensure_redis_binaries
	# Whatever is there is broken or partial: start from scratch.
	stop_nodes
	for p in "${ports[@]}"; do
		if _svc_tcp_open "$p" || _svc_tcp_open "$((p + 10000))"; then
			err "port $p or its cluster bus port $((p + 10000)) is taken by something else"
			return 1
		fi
	done
	mkdir -p "$dir"
	for p in "${ports[@]}"; do
		mkdir -p "$dir/$p"
		if ! redis-server --port "$p" --bind 127.0.0.1 --dir "$dir/$p" \
			--cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout 5000 \
			--save "" --appendonly no --daemonize yes \
			--pidfile "$dir/$p/redis.pid" --logfile "$dir/$p/redis.log" >"$dir/$p/start.out" 2>&1 9>&-; then
			err "redis-server on port $p did not start:"
			sed 's/^/    /' "$dir/$p/start.out" >&2
			dump_logs
			return 1
		fi
		addrs+=("127.0.0.1:$p")
	done
	for p in "${ports[@]}"; do
		if ! _svc_wait "$wait_s" _svc_redis_ping "$p"; then
			err "node on port $p did not answer PING within ${wait_s}s"
			dump_logs
			return 1
		fi
	done
	if ! out=$(redis-cli --cluster create "${addrs[@]}" --cluster-replicas 0 --cluster-yes 2>&1); then
		err "redis-cli --cluster create failed:"
		printf '%s\n' "$out" | sed 's/^/    /' >&2
		dump_logs
		return 1
	fi
	if ! _svc_wait "$wait_s" healthy; then
		err "cluster not in cluster_state:ok on all nodes within ${wait_s}s"
		for p in "${ports[@]}"; do
			err "node $p: state=$(cluster_info "$p" cluster_state) known_nodes=$(cluster_info "$p" cluster_known_nodes)"
		done
		dump_logs
		return 1
	fi
}

# Serialise concurrent start/stop (two test runs at once) when flock is available. The lock is
# on fd 9, which the daemonised redis-server must not inherit (see "9>&-" above), or it would
# hold the lock for its whole life.
with_lock() {
	if command -v flock >/dev/null 2>&1; then
		exec 9>"${TMPDIR:-/tmp}/waitroom-redis-cluster.lock"
		if ! flock -w 120 9; then
			err "could not lock ${TMPDIR:-/tmp}/waitroom-redis-cluster.lock within 120s"
			return 1
		fi
	fi
	"$@"
}

case "${1:-}" in
start) with_lock start ;;
stop) with_lock stop_nodes ;;
status) healthy ;;
url) url ;;
*)
	echo "usage: $0 start|stop|status|url" >&2
	exit 2
	;;
esac
