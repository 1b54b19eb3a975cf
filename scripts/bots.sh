#!/usr/bin/env bash
# Runs the bots' acceptance of issue 12: real users with and without a bot at full speed in each
# mode, on waitroom instances sharing one Redis and one PostgreSQL, and prints the table (real
# users' median and p90 time to admission without and with the bot, their ratio, users lost,
# the worst /healthz latency, and what the bot got against what the limits allow).
#
#   scripts/bots.sh                                  # 5,000 users, 1 instance, every mode
#   scripts/bots.sh --instances 3 --modes "stuff squat"
#   scripts/bots.sh --users 1000 --admit-rate 50 --bot-addrs 127.0.2.0/25 --bots 100 --modes stuff
#
# Options (defaults in brackets): --instances N [1], --users N [5000], --admit-rate R [100]
# (admissions/s: 5,000 users take 50 s, so that the time to admission is the rate's), --modes
# LIST ["stuff squat connections hoard"], --bots N [1], --bot-addrs CIDR [127.0.2.1: every bot
# on one address], --bot-concurrency N [8], --event-extra JSON [none: fields added to each
# event, e.g. '"limits":{"joins_per_client":60}'], --crowd-extra ARGS [none: crowd flags added
# to every run, baselines included, e.g. --presolve], --bots-apart NICE [none: the bots run in
# the users' crowd process; with a niceness, in a crowd process of their own (--users 0) at
# that niceness, started when the users start and interrupted when they are done, so that
# the bots' CPU (a challenge's solving) is not taken from the users' process or the instances
# before theirs: NICE 19 models an attacker's own machine, see docs/bots.md], --out DIR [a new
# temporary directory].
# The users come from 127.0.1.0/24 (256 addresses), the bots from --bot-addrs: the server, which
# limits per client address, tells them apart (Linux: all of 127.0.0.0/8 is local).
#
# Each run has an event of its own (max_active 100,000, so that only the rate admits; the
# default limits per client). Everything runs on 127.0.0.1: the instances with
# their own database (created and dropped) and Redis key prefix (deleted at the end), on the
# Redis and PostgreSQL of scripts/services.sh. Exit code: 0 when every run ended without
# problems by crowd's own checks (users lost, 5xx, FIFO, bots over the limits, /healthz failing
# or slower than 1 s); the 10 % rule on the median is printed, not enforced.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
# The service module on its own go.mod, as the image builds it (not through go.work).
export GOWORK=off
# shellcheck source=scripts/services.sh
source scripts/services.sh

instances=1 users=5000 admit_rate=100 modes="stuff squat connections hoard" bots=1
bot_addrs=127.0.2.1 bot_concurrency=8 event_extra="" crowd_extra="" bots_apart="" out=""
while [ $# -gt 0 ]; do
	case $1 in
	--instances) instances=$2 ;;
	--users) users=$2 ;;
	--admit-rate) admit_rate=$2 ;;
	--modes) modes=$2 ;;
	--bots) bots=$2 ;;
	--bot-addrs) bot_addrs=$2 ;;
	--bot-concurrency) bot_concurrency=$2 ;;
	--event-extra) event_extra=$2 ;;
	--crowd-extra) crowd_extra=$2 ;;
	--bots-apart) bots_apart=$2 ;;
	--out) out=$2 ;;
	*)
		echo "bots.sh: unknown option $1 (see the comment at the top)" >&2
		exit 2
		;;
	esac
	shift 2
done

ensure_go
ensure_redis
ensure_postgres
mkdir -p bin
go build -o bin/waitroom ./cmd/waitroom
out=${out:-$(mktemp -d "${TMPDIR:-/tmp}/waitroom-bots.XXXXXX")}
mkdir -p "$out"

tag="bots$$"
db="waitroom_$tag"
prefix="$tag:"
redis_port=${WAITROOM_REDIS_PORT:-6379}
pg_port=${WAITROOM_PG_PORT:-5432}
export WAITROOM_ADMIN_KEY="bots-admin-key-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
export WAITROOM_TOKEN_KEY="bots-token-key-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
psql -q -h 127.0.0.1 -p "$pg_port" -U postgres -c "CREATE DATABASE $db" >/dev/null

pids=()
cleanup() {
	for pid in "${pids[@]}"; do
		kill -INT "$pid" 2>/dev/null || true
	done
	for pid in "${pids[@]}"; do
		wait "$pid" 2>/dev/null || true
	done
	psql -q -h 127.0.0.1 -p "$pg_port" -U postgres -c "DROP DATABASE IF EXISTS $db" >/dev/null || true
	redis-cli -h 127.0.0.1 -p "$redis_port" --scan --pattern "$prefix*" |
		xargs -r -n 500 redis-cli -h 127.0.0.1 -p "$redis_port" unlink >/dev/null || true
}
trap cleanup EXIT

targets=""
for i in $(seq 1 "$instances"); do
	log="$out/serve-$i.log"
	: >"$log" # there before the loop below reads it
	bin/waitroom serve --addr 127.0.0.1:0 --redis "redis://127.0.0.1:$redis_port" \
		--database "postgres://postgres@127.0.0.1:$pg_port/$db?sslmode=disable" --redis-prefix "$prefix" \
		--access-log=false --drain 0 2>"$log" &
	pids+=($!)
	addr=""
	for _ in $(seq 1 300); do
		addr=$(sed -n 's/.*waitroom serving" addr=\([^ ]*\).*/\1/p' "$log" | head -1)
		[ -n "$addr" ] && break
		sleep 0.1
	done
	if [ -z "$addr" ]; then
		echo "bots.sh: instance $i did not start; its log:" >&2
		cat "$log" >&2
		exit 1
	fi
	targets="$targets${targets:+,}http://$addr"
done
echo "bots.sh: $instances instance(s) at $targets; reports in $out" >&2

status=0
# run NAME [crowd flags...]: one crowd run on an event of its own, its JSON report in
# $out/NAME.json and the load average before and after in $out/NAME.load.
run() {
	local name=$1
	shift
	local ev="$tag-$name"
	if [ -n "$event_extra" ]; then
		curl -sf -X PUT -H "Authorization: Bearer $WAITROOM_ADMIN_KEY" -H 'Content-Type: application/json' \
			-d "{\"max_active\":100000,\"admit_rate\":$admit_rate,\"capacity\":100000,$event_extra}" \
			"${targets%%,*}/v1/events/$ev" >/dev/null
	fi
	echo "bots.sh: run $name" >&2
	cut -d' ' -f1 /proc/loadavg >"$out/$name.load"
	local slow0
	slow0=$(healthz_slow)
	# /healthz from processes of their own too, one per instance: crowd's probe shares the
	# crowd's CPU, which users solving challenges saturate (its latencies then include the
	# crowd's own scheduling).
	local probers=() t
	: >"$out/$name.curl"
	for t in ${targets//,/ }; do
		(while :; do
			curl -s -o /dev/null -m 10 -w '%{time_total}\n' "$t/healthz" || echo 10
			sleep 0.1
		done) >>"$out/$name.curl" &
		probers+=($!)
	done
	local userargs=("$@") botargs=()
	if [ -n "$bots_apart" ] && [ $# -gt 0 ]; then
		userargs=()
		botargs=("$@")
	fi
	# shellcheck disable=SC2086 # $crowd_extra: flags, split on purpose
	bin/waitroom crowd --target "$targets" --event "$ev" --users "$users" --concurrency 256 \
		--max-active 100000 --admit-rate "$admit_rate" --seats 100000 --deadline 5m \
		--user-addrs 127.0.1.0/24 --healthz-probe 100ms --healthz-max 1s \
		--json "$out/$name.json" $crowd_extra "${userargs[@]}" >"$out/$name.txt" 2>"$out/$name.progress" &
	local crowd=$! bots=""
	if [ ${#botargs[@]} -gt 0 ]; then
		# The bots' own process, from the moment the users start (after their --presolve).
		until grep -q "the users start now" "$out/$name.progress" || ! kill -0 "$crowd" 2>/dev/null; do
			sleep 0.05
		done
		nice -n "$bots_apart" bin/waitroom crowd --target "$targets" --event "$ev" --users 0 --deadline 5m \
			--json "$out/$name.bots.json" "${botargs[@]}" >"$out/$name.bots.txt" 2>"$out/$name.bots.progress" &
		bots=$!
	fi
	wait "$crowd" || status=1
	if [ -n "$bots" ]; then
		kill -INT "$bots"
		wait "$bots" || status=1
		jq --slurpfile b "$out/$name.bots.json" '.bots = $b[0].bots' "$out/$name.json" >"$out/$name.json.tmp"
		mv "$out/$name.json.tmp" "$out/$name.json"
	fi
	kill "${probers[@]}"
	wait "${probers[@]}" 2>/dev/null || true
	cut -d' ' -f1 /proc/loadavg >>"$out/$name.load"
	sort -n "$out/$name.curl" | tail -1 | awk '{printf "%.2f\n", $1 * 1000}' >"$out/$name.curlmax"
	echo $(($(healthz_slow) - slow0)) >"$out/$name.srvslow"
}

# healthz_slow prints how many /healthz requests all instances have handled in more than 100 ms
# (their own waitroom_http_request_duration_seconds, from the request's routing to its answer):
# what the instances themselves spent, beside what the probes saw from outside.
healthz_slow() {
	local t n=0 c
	for t in ${targets//,/ }; do
		c=$(curl -s -m 10 -H "Authorization: Bearer $WAITROOM_ADMIN_KEY" "$t/metrics" |
			awk '/^waitroom_http_request_duration_seconds_bucket\{.*route="\/healthz"/ && /le="0.1"/ {b += $NF}
				/^waitroom_http_request_duration_seconds_count\{.*route="\/healthz"/ {c += $NF}
				END {printf "%d", c - b}')
		n=$((n + ${c:-0}))
	done
	echo "$n"
}

# A baseline run without bots before each mode and after the last: each mode is compared with
# the mean of the baselines on either side of it, so that the drift of a shared machine's load
# weighs on both sides alike.
run base0
i=0
for mode in $modes; do
	run "$mode" --bots "$bots" --bot-mode "$mode" --bot-addrs "$bot_addrs" --bot-concurrency "$bot_concurrency"
	i=$((i + 1))
	run "base$i"
done

{
	printf '%s\n' "| mode | real p50 / p90 without (s) | with (s) | p50 ratio | lost | worst /healthz, crowd's probe (ms) | worst /healthz, curl (ms) | bot tickets (allowed) | slots held | push conns (allowed) | units bought | 429s | over the limits | load before/after |"
	printf '%s\n' "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
	i=0
	for mode in $modes; do
		jq -r --slurpfile a "$out/base$i.json" --slurpfile b "$out/base$((i + 1)).json" --arg mode "$mode" \
			--arg load "$(paste -sd/ "$out/$mode.load")" --arg curl "$(cat "$out/$mode.curlmax") (baselines $(cat "$out/base$i.curlmax"), $(cat "$out/base$((i + 1)).curlmax")); in the instances > 100 ms: $(cat "$out/$mode.srvslow")" '
			def r(x): (x * 100 | round) / 100;
			([$a[0], $b[0]] | map(.time_to_admission_s.p50) | add / 2) as $p50
			| ([$a[0], $b[0]] | map(.time_to_admission_s.p90) | add / 2) as $p90
			| .bots as $bot
			| "| \($mode) | \(r($p50)) / \(r($p90)) | \(r(.time_to_admission_s.p50)) / \(r(.time_to_admission_s.p90)) | \(r(.time_to_admission_s.p50 / $p50)) | \(.lost) | \(r(.healthz.latency_ms.max)) (baselines \(r($a[0].healthz.latency_ms.max)), \(r($b[0].healthz.latency_ms.max))) | \($curl) | \($bot.tickets) (\($bot.allowed.tickets)) | \($bot.slots_held) | \($bot.conns) (\($bot.allowed.conns)) | \($bot.units_bought) | \($bot.rate_limited) | \(if ($bot.over | length) == 0 then "none" else ($bot.over | join(", ")) end) | \($load) |"' \
			"$out/$mode.json"
		i=$((i + 1))
	done
	echo
	echo "baselines (p50 / p90 s, lost, load before/after):"
	for j in $(seq 0 "$i"); do
		jq -r --arg n "base$j" --arg load "$(paste -sd/ "$out/base$j.load")" \
			'"  \($n): \(.time_to_admission_s.p50) / \(.time_to_admission_s.p90), lost \(.lost), load \($load)"' "$out/base$j.json"
	done
} >"$out/table.txt"
cat "$out/table.txt"
exit $status
