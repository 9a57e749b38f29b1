#!/bin/sh
# smg (the SGLang Model Gateway, `pip install smg`) in front of superfluid replicas.
#
#   ROUTER_PORT=8000 deploy/smg.sh http://10.0.0.11:8453 http://10.0.0.12:8453
#
# SMG_POLICY picks how a request finds its replica:
#   consistent_hashing (default)  session affinity on the X-Session-ID header: a conversation's
#                                 turns reach the replica that keeps its KV
#   cache_aware                   prefix affinity: smg routes by the prompt's longest match in
#                                 a tree of what it sent each replica
#   round_robin                   no affinity
# smg checks /health every second (a 503 takes a replica out at once) and retries a refused
# connection, a 503 or a 429 on another replica. Its circuit breaker shuts a replica out after
# 10 failures; 5 s (not 60) before it tries again, so a replica back from a restart is used again
# as soon as its health check passes. tests/integration/test_routers.py runs this script as
# written, on loopback.
set -eu
[ $# -ge 1 ] || { echo "usage: ROUTER_PORT=N $0 REPLICA_URL..." >&2; exit 2; }
policy=${SMG_POLICY:-consistent_hashing}
case "$policy" in
  consistent_hashing) affinity="--routing-key-headers X-Session-ID" ;;
  cache_aware) affinity="--routing-key-override --routing-key-headers X-Session-ID" ;;
  *) affinity="" ;;
esac
# shellcheck disable=SC2086  # $affinity is a list of flags
exec smg launch \
  --host "${ROUTER_BIND:-127.0.0.1}" --port "${ROUTER_PORT:?ROUTER_PORT is the port to serve}" \
  --worker-urls "$@" \
  --policy "$policy" $affinity \
  --health-check-endpoint /health --health-check-interval-secs 1 --health-check-timeout-secs 2 \
  --health-failure-threshold 1 --health-success-threshold 1 \
  --worker-startup-check-interval 1 \
  --cb-timeout-duration-secs 5 \
  --retry-max-retries 3 --retry-initial-backoff-ms 10 --retry-max-backoff-ms 200 \
  --sse-keepalive-secs 0 \
  --prometheus-host 127.0.0.1 --prometheus-port "${SMG_METRICS_PORT:-29000}"
