#!/usr/bin/env bash
# scripts/compose-check.sh: the docker-compose deployment, for real.
#
# Builds the image and starts the stack of docker-compose.yml (redis, three
# app replicas, nginx, and Prometheus of the monitoring profile) under a
# project name of its own, checks that all replicas answer through the load
# balancer, runs the loadtest profile through the load balancer (its
# invariant check decides), checks the live dashboard through nginx and
# that Prometheus saw every replica sell, and always tears the stack down
# with its volumes, whatever happened.
#
# Needs docker with the compose v2 plugin, and curl. Settings (environment):
#   LB_PORT=8080            host port of the load balancer (loopback)
#   REPLICAS=3              replicas expected behind it
#   UP_TIMEOUT=600          seconds for build + start until healthy
#   LB_TIMEOUT=60           seconds for every replica to answer through nginx
#   LOADTEST_TIMEOUT=180    seconds for the load test
#   LOADTEST_STOCK, LOADTEST_BUYERS, LOADTEST_WINDOW: see docker-compose.yml
#   MONITORING=1            0 leaves Prometheus out (and its check)
#   PROM_PORT=9090          host port of Prometheus (loopback)
#   PROM_TIMEOUT=90         seconds for Prometheus to show every replica's rate
set -euo pipefail
cd "$(dirname "$0")/.."

LB_PORT=${LB_PORT:-8080}
REPLICAS=${REPLICAS:-3}
UP_TIMEOUT=${UP_TIMEOUT:-600}
LB_TIMEOUT=${LB_TIMEOUT:-60}
LOADTEST_TIMEOUT=${LOADTEST_TIMEOUT:-180}
MONITORING=${MONITORING:-1}
PROM_PORT=${PROM_PORT:-9090}
PROM_TIMEOUT=${PROM_TIMEOUT:-90}
export LB_PORT PROM_PORT

# A project name of its own: containers, network and volume are
# <project>-..., so this never touches another stack (not even a
# `docker compose up` of the same file, whose project is "seckill").
project="seckill-check-$(date +%s)-$$"
compose=(docker compose -p "$project" -f docker-compose.yml)
profiles=()
[ "$MONITORING" = 1 ] && profiles=(--profile monitoring)

log() { echo "[compose-check +$((SECONDS - t0))s] $*"; }
t0=$SECONDS
result="FAIL (set-up)"
phases=""

version=$(docker compose version --short 2>/dev/null || true)
if ! [[ ${version#v} =~ ^[2-9]\. ]]; then
	echo "compose-check: needs the docker compose v2 plugin (for up --wait); got: $(docker compose version 2>&1 | head -1)" >&2
	exit 1
fi
command -v curl >/dev/null || { echo "compose-check: needs curl" >&2; exit 1; }

teardown() {
	local rc=$?
	trap - EXIT INT TERM
	if [ "$rc" -ne 0 ]; then
		log "failed (exit $rc); last logs:"
		timeout 30 "${compose[@]}" logs --no-color --tail=40 2>&1 || true
	fi
	log "docker compose down -v"
	# --profile: the loadtest container, if one is left, goes too.
	timeout 120 "${compose[@]}" --profile loadtest --profile monitoring down -v --remove-orphans --timeout 20 >/dev/null 2>&1 \
		|| echo "compose-check: teardown of project $project failed; run: docker compose -p $project down -v" >&2
	echo "compose-check: $result in $((SECONDS - t0))s ($project:${phases})"
	exit "$rc"
}
trap teardown EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# 1. Build and start; --wait returns once every service is running and
# every health check passes (redis ping, each replica's /readyz).
# timeout --foreground: a Ctrl-C still reaches docker compose.
log "up -d --build --wait (project $project, port $LB_PORT${profiles[*]:+, ${profiles[*]}})"
t=$SECONDS
result="FAIL (build or start)"
timeout --foreground "$UP_TIMEOUT" "${compose[@]}" "${profiles[@]}" up -d --build --wait --wait-timeout "$UP_TIMEOUT"
phases+=" up $((SECONDS - t))s"
running=$("${compose[@]}" ps --status running -q app | wc -l)
log "stack healthy; $running app replicas running"
if [ "$running" -ne "$REPLICAS" ]; then
	result="FAIL ($running app replicas running, want $REPLICAS)"
	exit 1
fi

# 2. Every replica answers through nginx: poll /readyz until the distinct
# X-Upstream values number REPLICAS, or the deadline passes. Round-robin
# needs only REPLICAS requests; the loop allows for a slow start.
log "checking that all $REPLICAS replicas answer through the load balancer"
t=$SECONDS
result="FAIL (replicas through the load balancer)"
declare -A seen=()
requests=0 ok=0
deadline=$((SECONDS + LB_TIMEOUT))
while [ "${#seen[@]}" -lt "$REPLICAS" ]; do
	if [ "$SECONDS" -ge "$deadline" ]; then
		log "after ${LB_TIMEOUT}s and $requests requests ($ok answered 200): ${#seen[@]} replicas seen (${!seen[*]}), want $REPLICAS"
		exit 1
	fi
	requests=$((requests + 1))
	headers=$(curl -sS -o /dev/null -D - --max-time 5 "http://127.0.0.1:$LB_PORT/readyz" 2>/dev/null) || { sleep 0.2; continue; }
	status=$(printf '%s\n' "$headers" | awk 'NR==1 {print $2}')
	upstream=$(printf '%s\n' "$headers" | tr -d '\r' | awk -F': ' 'tolower($1)=="x-upstream" {print $2}')
	if [ "$status" = 200 ] && [ -n "$upstream" ]; then
		ok=$((ok + 1))
		seen[${upstream##*, }]=1 # after a retried GET: "a, b", b answered
	else
		sleep 0.2 # nginx or a replica not ready yet
	fi
done
log "$requests requests, ${#seen[@]} distinct replicas answered: ${!seen[*]}"
phases+=" lb $((SECONDS - t))s"

# 3. The flash sale through the load balancer; its exit code is the verdict
# of the invariant check (0: nothing oversold, 1: an invariant failed,
# 2: the sale could not run).
log "loadtest through the load balancer"
t=$SECONDS
result="FAIL (loadtest)"
set +e
timeout --foreground "$LOADTEST_TIMEOUT" "${compose[@]}" --profile loadtest run --rm -T loadtest
lt=$?
set -e
phases+=" loadtest $((SECONDS - t))s"
if [ "$lt" -ne 0 ]; then
	case $lt in
	1) result="FAIL (loadtest: invariant violated, exit 1)" ;;
	124) result="FAIL (loadtest: timed out after ${LOADTEST_TIMEOUT}s)" ;;
	*) result="FAIL (loadtest: exit $lt)" ;;
	esac
	exit "$lt"
fi

# 4. The live dashboard through nginx: the page, and its data, which must
# show the products as the API lists them and seconds that every replica
# added to (summed in the shared Redis, whichever replica answers).
log "dashboard through the load balancer"
t=$SECONDS
result="FAIL (dashboard)"
page=$(curl -sS --max-time 10 "http://127.0.0.1:$LB_PORT/dashboard")
case $page in *'id="chart-stock"'*) ;; *) log "GET /dashboard is not the dashboard page"; exit 1 ;; esac
data=$(curl -sS --max-time 10 "http://127.0.0.1:$LB_PORT/dashboard/data")
case $data in *'"scope":"shared"'*) ;; *) log "dashboard data is not shared: ${data:0:300}"; exit 1 ;; esac
# The products as the dashboard shows them and as the API lists them: both
# read the shared database, so they must agree.
products=${data%%\"seconds\":*} # the products come first; the seconds have stock and sold too
shown=$(printf '%s' "$products" | grep -o '"stock":[0-9]*,"sold":[0-9]*' || true)
listed=$(curl -sS --max-time 10 "http://127.0.0.1:$LB_PORT/api/v1/products" | grep -o '"stock":[0-9]*,"sold":[0-9]*' || true)
if [ -z "$shown" ] || [ "$shown" != "$listed" ] || ! printf '%s' "$shown" | grep -q '"sold":[1-9]'; then
	log "dashboard shows products [$shown], the API lists [$listed]: want the same, with a sale"
	exit 1
fi
case $data in *"\"replicas\":$REPLICAS,"*) ;; *) log "no second of the dashboard has all $REPLICAS replicas' counts: ${data:0:300}"; exit 1 ;; esac
log "dashboard: products as the API lists them ($(echo $shown)), seconds summed over $REPLICAS replicas"
phases+=" dashboard $((SECONDS - t))s"

# 5. Prometheus: it discovered every replica through DNS, scraped it, and its
# recording rule shows a non-zero purchases rate for each. Polled: the rule
# is evaluated every 5 s over scrapes every 5 s.
if [ "$MONITORING" = 1 ]; then
	log "Prometheus: a purchases rate for every replica"
	t=$SECONDS
	result="FAIL (Prometheus)"
	prom() { curl -sS --max-time 5 --get --data-urlencode "query=$1" "http://127.0.0.1:$PROM_PORT/api/v1/query"; }
	deadline=$((SECONDS + PROM_TIMEOUT))
	while :; do
		up=$(prom 'up{job="seckill"} == 1' 2>/dev/null | grep -o '"instance":"[^"]*"' | sort -u | wc -l) || up=0
		rates=$(prom 'instance_outcome:seckill_purchases:rate1m{outcome="created"} > 0' 2>/dev/null) || rates=""
		selling=$(printf '%s' "$rates" | grep -o '"instance":"[^"]*"' | sort -u | wc -l) || selling=0
		[ "$up" -eq "$REPLICAS" ] && [ "$selling" -eq "$REPLICAS" ] && break
		if [ "$SECONDS" -ge "$deadline" ]; then
			log "after ${PROM_TIMEOUT}s: $up of $REPLICAS replicas up, $selling with a purchases rate: ${rates:0:400}"
			exit 1
		fi
		sleep 1
	done
	per=$(printf '%s' "$rates" | sed 's/{"metric"/\n/g' | sed -n 's/.*"instance":"\([^"]*\)".*"value":\[[^,]*,"\([^"]*\)"\].*/\1=\2/p' | tr '\n' ' ')
	log "Prometheus: $up replicas up; purchases/s per replica over the last minute: $per"
	p99=$(prom 'job:seckill_lock_wait_seconds:p99_1m' | sed -n 's/.*"value":\[[^,]*,"\([^"]*\)"\].*/\1/p')
	log "Prometheus: lock wait p99 over the last minute: ${p99:-none} s"
	phases+=" prometheus $((SECONDS - t))s"
fi

result="OK: $REPLICAS replicas behind nginx, loadtest invariants held, dashboard shared${profiles[*]:+, Prometheus saw every replica sell}"
