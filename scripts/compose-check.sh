#!/usr/bin/env bash
# scripts/compose-check.sh: the docker-compose deployment, for real.
#
#   scripts/compose-check.sh       docker-compose.yml: redis, three app replicas, nginx
#   scripts/compose-check.sh ha    docker-compose.ha.yml: the same on PostgreSQL, with a
#                                  Redis master, a replica and three Sentinels
#
# Builds the image and starts the stack (with Prometheus of the monitoring
# profile) under a project name of its own, checks that all replicas answer
# through the load balancer, runs the loadtest profile through the load
# balancer (its invariant check decides), checks the live dashboard through
# nginx and that Prometheus saw every replica sell, and always tears the
# stack down with its volumes, whatever happened.
#
# With KILL_MASTER=1 (ha only), the load test is a steady sale of
# KILL_STOCK (1000) at KILL_RATE (100) requests/s for KILL_DURATION (30s),
# and the Redis master is killed (docker kill: SIGKILL) once it has sold
# KILL_AFTER (100). Every Sentinel must then name the replica as the new
# master (within FAILOVER_TIMEOUT, 120 s); the old master is started again
# and must become its replica (within REJOIN_TIMEOUT, 60 s); the sale must
# pass its check (nothing oversold) and sell out after the kill; and
# a second load test must pass and sell. The log says how long the sale
# stalled and when the Sentinels saw the master down and failed it over.
# With LOCK_WAIT_REPLICAS=1 the sale resumes only once the old master is
# back as a replica: give it a longer KILL_DURATION (60s) on a busy host.
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
#   KILL_MASTER=0, KILL_STOCK, KILL_RATE, KILL_DURATION, KILL_AFTER,
#   FAILOVER_TIMEOUT, REJOIN_TIMEOUT: above
set -euo pipefail
cd "$(dirname "$0")/.."

stack=${1:-single}
case $stack in
single) file=docker-compose.yml ;;
ha) file=docker-compose.ha.yml ;;
*) echo "usage: $0 [ha]" >&2; exit 2 ;;
esac
KILL_MASTER=${KILL_MASTER:-0}
KILL_DURATION=${KILL_DURATION:-30s}
KILL_RATE=${KILL_RATE:-100}
KILL_STOCK=${KILL_STOCK:-1000}
KILL_AFTER=${KILL_AFTER:-100}
FAILOVER_TIMEOUT=${FAILOVER_TIMEOUT:-120}
REJOIN_TIMEOUT=${REJOIN_TIMEOUT:-60}
if [ "$KILL_MASTER" = 1 ] && [ "$stack" != ha ]; then
	echo "compose-check: KILL_MASTER=1 needs the ha stack (it has a master to kill and a replica to promote)" >&2
	exit 2
fi

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
project="seckill-check-$stack-$(date +%s)-$$"
compose=(docker compose -p "$project" -f "$file")
profiles=()
[ "$MONITORING" = 1 ] && profiles=(--profile monitoring)
# An image tag of its own too: another checkout building seckill:local at
# the same time must not swap the image under this run. The layers stay in
# the build cache; only the tag goes at the end.
export SECKILL_IMAGE="seckill:$project"

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
	# The kill's sale and its sampler, if the check stopped during them.
	for pid in ${sampler_pid:-} ${loadtest_pid:-}; do kill "$pid" 2>/dev/null || true; done
	rm -f "${samples:-}"
	log "docker compose down -v"
	# --profile: the loadtest container, if one is left, goes too.
	timeout 120 "${compose[@]}" --profile loadtest --profile monitoring down -v --remove-orphans --timeout 20 >/dev/null 2>&1 \
		|| echo "compose-check: teardown of project $project failed; run: docker compose -p $project down -v" >&2
	docker image rm "$SECKILL_IMAGE" >/dev/null 2>&1 || true
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

# Prometheus's instant queries, and how many replicas it has scraped.
prom() { curl -sS --max-time 5 --get --data-urlencode "query=$1" "http://127.0.0.1:$PROM_PORT/api/v1/query"; }
prom_up() {
	local n
	n=$(prom 'up{job="seckill"} == 1' 2>/dev/null | grep -o '"instance":"[^"]*"' | sort -u | wc -l) || true
	echo "${n:-0}"
}

# 2b. Prometheus has scraped every replica before the sale: a rate needs
# the counters' values from before the sale as well as after it, and the
# burst can be over within one scrape interval.
if [ "$MONITORING" = 1 ]; then
	log "Prometheus: every replica scraped before the sale"
	t=$SECONDS
	result="FAIL (Prometheus before the sale)"
	deadline=$((SECONDS + PROM_TIMEOUT))
	until [ "$(prom_up)" -eq "$REPLICAS" ]; do
		if [ "$SECONDS" -ge "$deadline" ]; then
			log "after ${PROM_TIMEOUT}s: $(prom_up) of $REPLICAS replicas scraped"
			exit 1
		fi
		sleep 1
	done
	phases+=" scraped $((SECONDS - t))s"
fi

# Which load test failed how: its exit code is the verdict of the invariant
# check (0: nothing oversold, 1: an invariant failed, 2: the sale could not
# run).
loadtest_failed() {
	case $1 in
	1) result="FAIL ($2: invariant violated, exit 1)" ;;
	124) result="FAIL ($2: timed out after ${LOADTEST_TIMEOUT}s)" ;;
	*) result="FAIL ($2: exit $1)" ;;
	esac
	exit "$1"
}

# KILL_MASTER=1: the Redis master killed in the middle of a sale (steps 3
# to 6 in place of the plain load test).
kill_master() {
	ms() { date +%s%3N; }
	ip_of() { docker inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' "$1"; }
	# docker kill, start and exec on the containers' IDs rather than docker
	# compose kill and the like, which can take seconds to start on a busy host.
	master_id=$("${compose[@]}" ps -q redis-master)
	replica_ip=$(ip_of "$("${compose[@]}" ps -q redis-replica)")
	sentinel_ids=()
	for s in sentinel-1 sentinel-2 sentinel-3; do sentinel_ids+=("$("${compose[@]}" ps -q "$s")"); done
	# A steady sale in the background (not the service's default burst): with
	# the defaults it takes about 10 s to sell out, so the kill lands mid-sale
	# and the failover has time to end within it.
	log "loadtest through the load balancer: $KILL_STOCK at $KILL_RATE requests/s for $KILL_DURATION"
	t=$SECONDS
	timeout --foreground "$LOADTEST_TIMEOUT" "${compose[@]}" --profile loadtest run --rm -T loadtest \
		loadtest -targets=http://lb:8080 -stock="$KILL_STOCK" -rate="$KILL_RATE" -duration="$KILL_DURATION" -progress=lines &
	loadtest_pid=$!
	# What buyers see, sampled until the sale ends: "ms stock sold", the time
	# taken before each request.
	samples=$(mktemp)
	(while kill -0 "$loadtest_pid" 2>/dev/null; do
		sleep 0.1
		now=${EPOCHREALTIME/./}
		p=$(product) && echo "$((now / 1000)) $p"
	done) >"$samples" &
	sampler_pid=$!

	result="FAIL (the sale did not reach $KILL_AFTER sold within 60s, so the master was not killed)"
	deadline=$((SECONDS + 60))
	sold=0
	until [ "${sold:-0}" -ge "$KILL_AFTER" ]; do
		[ "$SECONDS" -lt "$deadline" ] && kill -0 "$loadtest_pid" 2>/dev/null || exit 1
		sleep 0.1
		read -r _ _ sold < <(tail -1 "$samples"; echo)
	done
	log "$sold sold; docker kill redis-master (SIGKILL)"
	# The kill's time is taken before the command: the master dies during it,
	# and Docker records its end only once it has handled the exit, which can
	# be a second later on a busy host.
	killed=$(ms)
	docker kill "$master_id" >/dev/null
	log "docker kill took $(($(ms) - killed)) ms"

	# 4. The failover, during the sale: a Sentinel names the replica, by its
	# address (they watch addresses: deploy/sentinel.conf), within
	# FAILOVER_TIMEOUT. (A Sentinel on a host too busy to keep its timers
	# enters TILT mode and does nothing for 30 s, so this is patient.)
	names_replica() {
		[ "$(docker exec "$1" redis-cli -p 26379 sentinel get-master-addr-by-name seckill 2>/dev/null |
			awk 'NR == 1' | tr -d '\r')" = "$replica_ip" ]
	}
	result="FAIL (sentinel-1 did not name redis-replica ($replica_ip) as the master within ${FAILOVER_TIMEOUT}s of the kill)"
	until names_replica "${sentinel_ids[0]}"; do
		[ $(($(ms) - killed)) -lt $((FAILOVER_TIMEOUT * 1000)) ] || exit 1
		sleep 0.2
	done
	log "sentinel-1 names redis-replica ($replica_ip) as the master"

	# 5. The old master comes back, as `docker compose start redis-master`
	# brings it back: the Sentinels make it a replica of the new master, which
	# it must be within REJOIN_TIMEOUT. (With LOCK_WAIT_REPLICAS=1 the sale
	# resumes only then: until a replica acknowledges, no lock is granted.)
	started=$(ms)
	docker start "$master_id" >/dev/null
	log "docker start redis-master took $(($(ms) - started)) ms"

	lt=0
	wait "$loadtest_pid" || lt=$?
	wait "$sampler_pid" || true
	phases+=" loadtest+kill $((SECONDS - t))s"
	[ "$lt" -eq 0 ] || loadtest_failed "$lt" "loadtest with the kill"
	# The longest stretch without a sale that ends after the kill (purchases
	# that held the lock then may still finish just after it): what buyers saw
	# of the failover.
	read -r at_kill before after sold_before sold_end last_sale last_sample < <(awk -v k="$killed" '
		$1 <= k { atk = $3 }
		$3 > sold {
			if (t > 0 && $1 > k && $1 - t > to - from) { from = t; to = $1; at = sold }
			t = $1; sold = $3
		}
		END { printf "%.0f %.0f %.0f %.0f %.0f %.0f %.0f\n", atk, from, to, at, sold, t, $1 }' "$samples")
	result="FAIL (the sale had sold out before the master died: raise KILL_STOCK or lower KILL_RATE)"
	[ "$at_kill" -lt "$KILL_STOCK" ] || exit 1
	result="FAIL (nothing sold after the master died: the sale did not resume)"
	[ "$after" -gt "$killed" ] || exit 1
	log "the sale stalled for $((after - before)) ms: no sale seen from $((before - killed)) ms to $((after - killed)) ms after the kill; $sold_before sold before, $((sold_end - sold_before)) after"
	[ "$sold_end" -eq "$KILL_STOCK" ] ||
		log "the sale did not sell out: $sold_end sold, the last sale seen $((last_sale - killed)) ms after the kill, the last sample $((last_sample - killed)) ms after it"
	result="FAIL (the sale resumed after the kill but did not sell out: $sold_end of $KILL_STOCK sold in $KILL_DURATION)"
	[ "$sold_end" -eq "$KILL_STOCK" ] || exit 1

	for i in 1 2; do
		result="FAIL (sentinel-$((i + 1)) did not name redis-replica ($replica_ip) as the master within ${FAILOVER_TIMEOUT}s of the kill)"
		until names_replica "${sentinel_ids[$i]}"; do
			[ $(($(ms) - killed)) -lt $((FAILOVER_TIMEOUT * 1000)) ] || exit 1
			sleep 0.2
		done
	done
	result="FAIL (the old master did not become a replica of redis-replica within ${REJOIN_TIMEOUT}s of its start)"
	until docker exec "$master_id" redis-cli info replication 2>/dev/null | tr -d '\r' | awk -F: -v ip="$replica_ip" '
		$1 == "master_host" && $2 == ip { host = 1 }
		$1 == "master_link_status" && $2 == "up" { up = 1 }
		END { exit !(host && up) }'; do
		[ $(($(ms) - started)) -lt $((REJOIN_TIMEOUT * 1000)) ] || exit 1
		sleep 0.5
	done
	# The failover's steps, from the servers' own log lines (Docker's
	# timestamps): the Sentinels' first "+sdown" of the master
	# (down-after-milliseconds) and "+switch-master" to the replica, and the
	# old master's first full sync from the new one.
	stamp() {
		"${compose[@]}" logs --no-color --no-log-prefix -t "${@:2}" 2>/dev/null |
			awk -v text="$1" 'index($0, text) { print $1 }' | sort | awk 'NR == 1' | xargs -r date +%s%3N -d
	}
	sdown=$(stamp '+sdown master' sentinel-1 sentinel-2 sentinel-3)
	switched=$(stamp '+switch-master' sentinel-1 sentinel-2 sentinel-3)
	synced=$(stamp "MASTER <-> REPLICA sync: Finished" redis-master)
	log "every Sentinel names redis-replica as the master, and the old master is its replica; the logs: master seen down (+sdown; down-after-milliseconds 2000) $((${sdown:-0} - killed)) ms after the kill began, failed over (+switch-master) $((${switched:-0} - ${sdown:-0})) ms later; the old master in sync $((${synced:-0} - started)) ms after docker start began"

	# 6. The sale goes on: another load test must pass and sell.
	log "loadtest after the failover"
	t=$SECONDS
	result="FAIL (loadtest after the failover)"
	lt=0
	timeout --foreground "$LOADTEST_TIMEOUT" "${compose[@]}" --profile loadtest run --rm -T loadtest || lt=$?
	phases+=" loadtest $((SECONDS - t))s"
	[ "$lt" -eq 0 ] || loadtest_failed "$lt" "loadtest after the failover"
	read -r _ sold < <(product; echo)
	result="FAIL (loadtest after the failover sold nothing)"
	[ "${sold:-0}" -gt 0 ] || exit 1
	outcome="master killed mid-sale: nothing oversold, no sale for $((after - before)) ms, then the sale resumed; failed over $((${switched:-0} - ${sdown:-0})) ms after the master was seen down; the old master back as a replica; the next sale sold $sold; invariants held"
}

# "stock sold" of the newest product (the sale's). One process (curl), so
# that a busy host still samples several times a second.
product() {
	local body p=""
	body=$(curl -fsS --max-time 1 "http://127.0.0.1:$LB_PORT/api/v1/products" 2>/dev/null) || return 1
	while [[ $body =~ \"stock\":([0-9]+),\"available\":[0-9]+,\"reserved\":[0-9]+,\"sold\":([0-9]+)(.*) ]]; do
		p="${BASH_REMATCH[1]} ${BASH_REMATCH[2]}" body=${BASH_REMATCH[3]}
	done
	[ -n "$p" ] && echo "$p"
}

# 3. The flash sale through the load balancer.
if [ "$KILL_MASTER" != 1 ]; then
	log "loadtest through the load balancer"
	t=$SECONDS
	result="FAIL (loadtest)"
	lt=0
	timeout --foreground "$LOADTEST_TIMEOUT" "${compose[@]}" --profile loadtest run --rm -T loadtest || lt=$?
	phases+=" loadtest $((SECONDS - t))s"
	[ "$lt" -eq 0 ] || loadtest_failed "$lt" loadtest
	outcome="loadtest invariants held"
else
	kill_master
fi

# 7. The live dashboard through nginx: the page, and its data, whose totals
# must be the sums of the products as the API lists them, with a product
# that sold among the hottest, and seconds that every replica added to
# (summed in the shared Redis, whichever replica answers).
log "dashboard through the load balancer"
t=$SECONDS
result="FAIL (dashboard)"
page=$(curl -sS --max-time 10 "http://127.0.0.1:$LB_PORT/dashboard")
case $page in *'id="chart-stock"'*) ;; *) log "GET /dashboard is not the dashboard page"; exit 1 ;; esac
data=$(curl -sS --max-time 10 "http://127.0.0.1:$LB_PORT/dashboard/data")
case $data in *'"scope":"shared"'*) ;; *) log "dashboard data is not shared: ${data:0:300}"; exit 1 ;; esac
# The dashboard's totals and the API's list both read the shared database,
# so they must agree.
listed=$(curl -sS --max-time 10 "http://127.0.0.1:$LB_PORT/api/v1/products" | grep -o '"stock":[0-9]*,"available":[0-9]*,"reserved":[0-9]*,"sold":[0-9]*' || true)
listed_products=0 listed_stock=0 listed_reserved=0 listed_sold=0
for pair in $listed; do
	pair_stock=${pair#\"stock\":} pair_stock=${pair_stock%%,*}
	pair_reserved=${pair#*\"reserved\":} pair_reserved=${pair_reserved%%,*}
	listed_products=$((listed_products + 1)) listed_stock=$((listed_stock + pair_stock))
	listed_reserved=$((listed_reserved + pair_reserved)) listed_sold=$((listed_sold + ${pair##*:}))
done
inventory=$(printf '%s' "$data" | grep -o '"inventory":{[^}]*}' || true)
want="\"inventory\":{\"products\":$listed_products,\"stock\":$listed_stock,\"reserved\":$listed_reserved,\"sold\":$listed_sold,"
top=${data#*\"top\":\[} top=${top%%\]*}
if [ "$listed_sold" -eq 0 ] || [ "${inventory#"$want"}" = "$inventory" ] || ! printf '%s' "$top" | grep -q '"sold":[1-9]'; then
	log "dashboard shows ${inventory:-no inventory} and top [${top:0:300}], the API lists [$(echo $listed)]: want the same sums, with a sale among the top"
	exit 1
fi
case $data in *"\"replicas\":$REPLICAS,"*) ;; *) log "no second of the dashboard has all $REPLICAS replicas' counts: ${data:0:300}"; exit 1 ;; esac
log "dashboard: totals as the API lists the products ($inventory), seconds summed over $REPLICAS replicas"
phases+=" dashboard $((SECONDS - t))s"

# 8. Prometheus: it discovered every replica through DNS, scraped it, and its
# recording rule shows a non-zero purchases rate for each. Polled: the rule
# is evaluated every 5 s over scrapes every 5 s.
if [ "$MONITORING" = 1 ]; then
	log "Prometheus: a purchases rate for every replica"
	t=$SECONDS
	result="FAIL (Prometheus)"
	deadline=$((SECONDS + PROM_TIMEOUT))
	while :; do
		up=$(prom_up)
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

result="OK ($stack stack): $REPLICAS replicas behind nginx; $outcome; dashboard shared${profiles[*]:+; Prometheus saw every replica sell}"
