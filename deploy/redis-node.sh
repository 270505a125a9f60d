#!/bin/sh
# Starts a Redis server of docker-compose.ha.yml: redis-master with no
# arguments, redis-replica with "--replicaof redis-master 6379".
#
# A node that starts again (after a crash, `docker compose start`) first
# asks the Sentinels which server is the master now, and starts as its
# replica, or as the master if it is that server. Its first-start
# arguments would be wrong after a failover: the old master would come
# back as a second master, empty, until the Sentinels notice and demote it
# (tens of seconds), and the promoted replica as a replica of its own
# replica. If no Sentinel answers (the stack's first start: they start
# after the servers), the node starts as its arguments say.
set -u

# No persistence: locks live for seconds, and the fence keeps the sale
# exact when a failover or a restart forgets some (README). Full syncs
# start at once (repl-diskless-sync-delay 0) rather than after Redis's 5 s
# wait for more replicas.
# Through the image's entrypoint, as a plain `redis-server` command would
# be: it turns protected mode off and drops root.
serve() { exec docker-entrypoint.sh redis-server --save "" --appendonly no --repl-diskless-sync-delay 0 "$@"; }

master=""
for sentinel in sentinel-1 sentinel-2 sentinel-3; do
	# "ip port", or nothing: the name does not resolve while the
	# sentinel's container does not run, and an unknown master is nil.
	master=$(timeout 2 redis-cli -h "$sentinel" -p 26379 sentinel get-master-addr-by-name seckill 2>/dev/null | tr '\n' ' ')
	case $master in [0-9a-f]*' '[0-9]*) break ;; esac
	master=""
done
if [ -z "$master" ]; then
	echo "redis-node: no Sentinel answers; starting with: $*"
	serve "$@"
fi
# shellcheck disable=SC2086 # split "ip port"
set -- $master
me=$(hostname -i | cut -d' ' -f1)
if [ "$1" = "$me" ]; then
	echo "redis-node: the Sentinels name this node ($me) the master"
	serve
fi
echo "redis-node: the Sentinels name $1:$2 the master; starting as its replica"
serve --replicaof "$1" "$2"
