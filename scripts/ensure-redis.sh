#!/usr/bin/env bash
# Make sure a Redis answers at $REDIS_URL (default redis://127.0.0.1:6379/0).
#
# 1. One already answers PING there: use it.
# 2. Otherwise, if the URL is on this machine and redis-server is installed: start one on that
#    port, daemonized, keeping nothing on disk, and wait until it answers.
# 3. Otherwise: say how to get one, and exit 1.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
URL=${REDIS_URL:-redis://127.0.0.1:6379/0}
SHOWN=$(sed -E 's#//[^@/]*@#//***@#' <<<"$URL")   # never print a password

say() { echo "ensure-redis: $*"; }

ping() {
    local reply
    if command -v redis-cli >/dev/null; then
        local limit=()
        command -v timeout >/dev/null && limit=(timeout 5)   # macOS has no timeout(1)
        reply=$(${limit[@]+"${limit[@]}"} redis-cli -u "$URL" ping 2>/dev/null || true)
    else
        local python="$ROOT/.venv/bin/python"
        [[ -x $python ]] || python=python3
        reply=$("$python" - "$URL" 2>/dev/null <<'PY' || true
import sys, redis
client = redis.Redis.from_url(sys.argv[1], socket_connect_timeout=2, socket_timeout=2)
print("PONG" if client.ping() else "")
PY
)
    fi
    [[ $reply == PONG ]]
}

how_to_get_one() {
    cat >&2 <<MSG
ensure-redis: no Redis answers at $SHOWN, and $1.
Hookline needs one. Any of these gives you one on 127.0.0.1:6379:
    Debian/Ubuntu:  sudo apt install redis-server     (then run this again: it starts one)
    macOS:          brew install redis                (same)
    Docker:         docker run -d --name hookline-redis -p 6379:6379 redis:7
or point REDIS_URL at a Redis you already have (REDIS_URL=redis://host:port/0 make ...).
MSG
    exit 1
}

if ping; then
    say "using the Redis answering at $SHOWN"
    exit 0
fi

# Where is it meant to be? redis://[user:password@]host[:port][/db]
if [[ ! $URL =~ ^redis://([^@/]*@)?(\[[^]]+\]|[^:/]*)(:([0-9]+))?(/.*)?$ ]]; then
    how_to_get_one "this script only starts a Redis for a plain redis://host:port URL"
fi
credentials=${BASH_REMATCH[1]}
host=${BASH_REMATCH[2]}
port=${BASH_REMATCH[4]:-6379}
case $host in
    127.0.0.1 | localhost | "" | "[::1]") ;;
    *) how_to_get_one "it is not on this machine ($host), so this script will not start one" ;;
esac
[[ -z $credentials ]] || how_to_get_one "the URL carries credentials: start that Redis yourself"
command -v redis-server >/dev/null || how_to_get_one "redis-server is not installed"

bind=127.0.0.1
[[ $host == "[::1]" ]] && bind=::1
dir="${TMPDIR:-/tmp}/hookline-redis-$port"
mkdir -p "$dir"
say "no Redis at $SHOWN; starting redis-server on $bind:$port (no persistence, files in $dir)"
redis-server --bind "$bind" --port "$port" --daemonize yes --save "" --appendonly no \
    --dir "$dir" --pidfile "$dir/redis.pid" --logfile "$dir/redis.log"

for _ in $(seq 50); do
    if ping; then
        say "redis-server is up (pid $(cat "$dir/redis.pid" 2>/dev/null || echo '?'));" \
            "stop it with: redis-cli -p $port shutdown nosave"
        exit 0
    fi
    sleep 0.2
done
echo "ensure-redis: redis-server started but does not answer at $SHOWN after 10 s." >&2
echo "ensure-redis: the end of its log ($dir/redis.log):" >&2
tail -n 20 "$dir/redis.log" >&2 || true
exit 1
