# Sourced by cluster.sh and sentinel.sh: the server and CLI binaries, by the
# rule of the Go tests (internal/redistest: ServerBin, CLIBin), so one
# variable switches every part of CI between Redis and Valkey.
#   SERVER: $REDISDELAY_REDIS_SERVER, else redis-server on the PATH, else valkey-server
#   CLI:    $REDISDELAY_REDIS_CLI, else the -cli beside SERVER, else redis-cli, else valkey-cli
# Either is empty when there is none; the caller says so when it needs it.
SERVER=${REDISDELAY_REDIS_SERVER:-$(command -v redis-server || command -v valkey-server || true)}
CLI=${REDISDELAY_REDIS_CLI:-}
if [ -z "$CLI" ] && [[ $SERVER == *-server ]] && [ -x "${SERVER%-server}-cli" ]; then
  CLI=${SERVER%-server}-cli
fi
CLI=${CLI:-$(command -v redis-cli || command -v valkey-cli || true)}
need_bins() {
  [ -n "$SERVER" ] || die "no server: set REDISDELAY_REDIS_SERVER, or install redis-server (apt-get install redis-server) or valkey-server"
  [ -n "$CLI" ] || die "no CLI: set REDISDELAY_REDIS_CLI, or install redis-cli or valkey-cli"
}
