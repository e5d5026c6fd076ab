#!/bin/sh
# The image's entrypoint (run under tini): `zookeeper`, `broker`, or any other command.
#
#   zookeeper   ZooKeeper 3.8 standalone from Debian's jars, dataDir /data, port 2181.
#               ZOO_TICK_TIME (ms, default 500), ZOO_MAX_SESSION_TIMEOUT (ms, default
#               60000), ZOO_HEAP_MB (default 256), ZOO_CFG_EXTRA (more zoo.cfg lines).
#               A member of an ensemble (deploy/docker-compose.ha.yml) with
#                 ZOO_MY_ID      its server id (written to /data/myid)
#                 ZOO_SERVERS    "server.1=host:2888:3888 server.2=..." every member
#                 ZOO_INIT_LIMIT / ZOO_SYNC_LIMIT  in ticks (default 20 / 10: 10 s / 5 s)
#   broker      `minibroker broker` configured from the environment:
#                 MINIBROKER_BROKER_ID          broker.id (required)
#                 MINIBROKER_PORT               port (default 9090 + id)
#                 MINIBROKER_ADVERTISED_HOST    host: bound and registered (default 127.0.0.1)
#                 MINIBROKER_ZOOKEEPER_CONNECT  zookeeper.connect (default zookeeper:2181)
#                 MINIBROKER_PEERS              "name:port ..." every broker of the cluster
#                 MINIBROKER_KAFKA_PORT         kafka.port, the Kafka protocol listener's
#                                               (default -1: none)
#                 MINIBROKER_KAFKA_PEERS        "name:port ..." every broker's Kafka port
#                 MINIBROKER_OVERRIDES          "key=value key=value" Kafka property names
#                 MINIBROKER_CFG_<NAME>=value   one property each: MIN_INSYNC_REPLICAS ->
#                                               min.insync.replicas (`_` -> `.`, `__` -> `_`)
#                 MINIBROKER_LOG_LEVEL          DEBUG, INFO (default) or WARNING
#                 MINIBROKER_FORWARDER_DEBUG    1: log the forwarders' connections and errors
#               Later settings win: MINIBROKER_OVERRIDES, then MINIBROKER_CFG_*, then the
#               id/port/host/zookeeper/data dir and Kafka port above.
#   anything else is executed as given (with the forwarders below when MINIBROKER_PEERS is
#   set, so `minibroker topics list` inside a container sees the same addresses as the host;
#   also MINIBROKER_KAFKA_PEERS', unless MINIBROKER_KAFKA_PORT=-1 says the brokers run none).
#
# Addresses. A broker binds and registers one host:port, which clients get back from
# Metadata. Here every broker uses 127.0.0.1:<its port>, the same port on the host (the
# compose file publishes 127.0.0.1:<port>:<port>), so from the host the addresses just
# work. Inside the network each container runs socat forwarders that make them work too:
#   - 127.0.0.1:<peer port> -> <peer name>:<peer port>, for every other broker;
#   - <the container's own addresses>:<port> -> 127.0.0.1:<port>, so that the published
#     port and the other brokers' forwarders reach a broker that listens on loopback.
# The Kafka protocol listener (MINIBROKER_KAFKA_PORT, bound on the same host) gets both
# too, from MINIBROKER_KAFKA_PEERS: the brokers never use it among themselves, but a Kafka
# client inside a container then gets addresses from Metadata that work there as well.
# The second set follows the container's addresses (re-checked every 2 s), so a broker
# disconnected from the network and connected again with a new address is reachable.
set -eu

log() { echo "minibroker-entrypoint: $*" >&2; }
die() { log "error: $*"; exit 2; }

SOCAT_OPTS="-b 131072"
LOOPBACK_OPTS="nodelay"
# The legs that cross the network: a peer that vanished without a FIN or RST (container
# disconnected from the network, or killed while a packet was in flight) must not leave a
# connection hanging forever, because gRPC would keep sending requests into it until each
# deadline. TCP keepalive after 10 s idle (3 probes 5 s apart) and TCP_USER_TIMEOUT
# (IPPROTO_TCP=6, option 18) of 20 s for unacknowledged data close such a leg; socat then
# closes the loopback side and the client reconnects through a fresh one.
NETWORK_OPTS="nodelay,keepalive,keepidle=10,keepintvl=5,keepcnt=3,sockopt-int=6:18:20000"
# A peer that is down makes its forwarder fail each connection attempt (about once a second,
# the clients' reconnect backoff): those errors go to /dev/null unless
# MINIBROKER_FORWARDER_DEBUG=1, which logs every connection instead.
if [ "${MINIBROKER_FORWARDER_DEBUG:-0}" = 1 ]; then
    SOCAT_OPTS="$SOCAT_OPTS -d -d"
    FORWARDER_LOG=/dev/stderr
else
    FORWARDER_LOG=/dev/null
fi

# 127.0.0.1:<port> -> <name>:<port> for each peer ($2, "name:port ...", from the variable
# named $3) other than our own port ($1).
start_peer_forwarders() {
    # POSIX sh has no local variables: every name here is prefixed, so that the caller's
    # $port and $host stay as they were.
    pf_own_port="$1"
    for pf_peer in $2; do
        pf_name="${pf_peer%:*}"
        pf_port="${pf_peer##*:}"
        case "$pf_port" in '' | *[!0-9]*) die "bad $3 entry '$pf_peer' (expected name:port)" ;; esac
        [ "$pf_port" = "$pf_own_port" ] && continue
        # shellcheck disable=SC2086
        socat $SOCAT_OPTS "TCP-LISTEN:$pf_port,bind=127.0.0.1,reuseaddr,fork,$LOOPBACK_OPTS" \
            "TCP:$pf_name:$pf_port,connect-timeout=3,$NETWORK_OPTS" 2>"$FORWARDER_LOG" &
        log "forwarding 127.0.0.1:$pf_port -> $pf_name:$pf_port"
    done
}

# <each non-loopback IPv4 address>:<port> -> 127.0.0.1:<port>, restarted when the
# addresses change or a listener died (e.g. it could not bind yet).
inbound_forwarder() {
    # Runs in a background subshell: its variables are its own.
    port="$1"
    current=""
    pids=""
    while :; do
        addresses="$(hostname -I 2>/dev/null | tr ' ' '\n' | grep -E '^[0-9]+(\.[0-9]+){3}$' | sort | tr '\n' ' ' || true)"
        alive=yes
        for pid in $pids; do
            kill -0 "$pid" 2>/dev/null || alive=no
        done
        if [ "$alive" = no ]; then
            log "a forwarder to 127.0.0.1:$port exited; starting it again"
        fi
        if [ "$addresses" != "$current" ] || [ "$alive" = no ]; then
            # shellcheck disable=SC2086
            if [ -n "$pids" ]; then kill $pids 2>/dev/null || true; fi
            pids=""
            for address in $addresses; do
                # shellcheck disable=SC2086
                socat $SOCAT_OPTS "TCP-LISTEN:$port,bind=$address,reuseaddr,fork,$NETWORK_OPTS" \
                    "TCP:127.0.0.1:$port,$LOOPBACK_OPTS" 2>"$FORWARDER_LOG" &
                pids="$pids $!"
                log "forwarding $address:$port -> 127.0.0.1:$port"
            done
            current="$addresses"
        fi
        sleep 2
    done
}

# MINIBROKER_CFG_MIN_INSYNC_REPLICAS=2 -> --override min.insync.replicas=2
cfg_overrides() {
    env | while IFS= read -r line; do
        case "$line" in
            MINIBROKER_CFG_*=*)
                name="${line%%=*}"
                value="${line#*=}"
                key="$(printf '%s' "${name#MINIBROKER_CFG_}" | tr '[:upper:]' '[:lower:]' \
                    | sed -e 's/__/@/g' -e 's/_/./g' -e 's/@/_/g')"
                printf '%s=%s\n' "$key" "$value"
                ;;
        esac
    done
}

run_zookeeper() {
    mkdir -p /data
    cfg=/tmp/zoo.cfg
    sed -e "s|@TICK_TIME@|${ZOO_TICK_TIME:-500}|" \
        -e "s|@MAX_SESSION_TIMEOUT@|${ZOO_MAX_SESSION_TIMEOUT:-60000}|" \
        -e "s|@DATA_DIR@|/data|" \
        /etc/minibroker-zoo.cfg.template >"$cfg"
    main=org.apache.zookeeper.server.ZooKeeperServerMain
    ensemble_opts=""
    if [ -n "${ZOO_MY_ID:-}" ]; then
        case "$ZOO_MY_ID" in *[!0-9]*) die "ZOO_MY_ID must be a server id (a number), not '$ZOO_MY_ID'" ;; esac
        [ -n "${ZOO_SERVERS:-}" ] || die "ZOO_MY_ID is set but ZOO_SERVERS (every member) is not"
        echo "$ZOO_MY_ID" >/data/myid
        {
            echo "initLimit=${ZOO_INIT_LIMIT:-20}"
            echo "syncLimit=${ZOO_SYNC_LIMIT:-10}"
            # Listen for followers and votes on every interface, not only on the address
            # our own name resolves to (which may change when the container reconnects).
            echo "quorumListenOnAllIPs=true"
            for server in $ZOO_SERVERS; do
                case "$server" in
                    server.[0-9]*=*:*:*) echo "$server" ;;
                    *) die "bad ZOO_SERVERS entry '$server' (expected server.N=host:2888:3888)" ;;
                esac
            done
        } >>"$cfg"
        main=org.apache.zookeeper.server.quorum.QuorumPeerMain
        # Election backs off up to a minute between rounds while a member does not answer;
        # capped at a second, an ensemble serves again soon after a majority is back.
        ensemble_opts="-Dzookeeper.fastleader.maxNotificationInterval=1000"
    fi
    if [ -n "${ZOO_CFG_EXTRA:-}" ]; then
        printf '%s\n' "$ZOO_CFG_EXTRA" >>"$cfg"
    fi
    log "zookeeper with $(tr '\n' ' ' <"$cfg")"
    # shellcheck disable=SC2086
    exec java "-Xmx${ZOO_HEAP_MB:-256}m" -XX:+UseSerialGC -Djava.awt.headless=true \
        -Dzookeeper.jmx.log4j.disable=true \
        -Dorg.slf4j.simpleLogger.showDateTime=true \
        "-Dorg.slf4j.simpleLogger.dateTimeFormat=yyyy-MM-dd'T'HH:mm:ss.SSSZ" \
        $ensemble_opts \
        -cp /usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar \
        "$main" "$cfg"
}

run_broker() {
    id="${MINIBROKER_BROKER_ID:-}"
    case "$id" in '' | *[!0-9]*) die "MINIBROKER_BROKER_ID must be set to the broker id (a number)" ;; esac
    port="${MINIBROKER_PORT:-$((9090 + id))}"
    host="${MINIBROKER_ADVERTISED_HOST:-127.0.0.1}"
    kafka_port="${MINIBROKER_KAFKA_PORT:--1}"
    case "$kafka_port" in
        -1) ;;
        '' | *[!0-9]* | 0) die "MINIBROKER_KAFKA_PORT must be a port, or -1 for no Kafka protocol listener, not '$kafka_port'" ;;
    esac
    mkdir -p /data
    set -- broker --id "$id" --host "$host" --port "$port" \
        --zookeeper "${MINIBROKER_ZOOKEEPER_CONNECT:-zookeeper:2181}" --data-dir /data \
        --log-level "${MINIBROKER_LOG_LEVEL:-INFO}"
    for item in ${MINIBROKER_OVERRIDES:-}; do
        set -- "$@" --override "$item"
    done
    overrides="$(cfg_overrides)"
    if [ -n "$overrides" ]; then
        # one per line: values may not hold newlines, but may hold spaces
        old_ifs="$IFS"
        IFS='
'
        for item in $overrides; do
            set -- "$@" --override "$item"
        done
        IFS="$old_ifs"
    fi
    if [ "$kafka_port" != -1 ]; then
        set -- "$@" --override "kafka.port=$kafka_port"
    fi
    case "$host" in
        127.* | localhost)
            start_peer_forwarders "$port" "${MINIBROKER_PEERS:-}" MINIBROKER_PEERS
            inbound_forwarder "$port" &
            if [ "$kafka_port" != -1 ]; then
                start_peer_forwarders "$kafka_port" "${MINIBROKER_KAFKA_PEERS:-}" MINIBROKER_KAFKA_PEERS
                inbound_forwarder "$kafka_port" &
            fi
            ;;
    esac
    log "minibroker $*"
    exec minibroker "$@"
}

role="${1:-broker}"
case "$role" in
    zookeeper)
        run_zookeeper
        ;;
    broker)
        shift || true
        [ "$#" -eq 0 ] || die "the broker role takes no arguments; configure it with MINIBROKER_* variables"
        run_broker
        ;;
    *)
        if [ -n "${MINIBROKER_PEERS:-}" ]; then
            start_peer_forwarders "" "$MINIBROKER_PEERS" MINIBROKER_PEERS
        fi
        if [ -n "${MINIBROKER_KAFKA_PEERS:-}" ] && [ "${MINIBROKER_KAFKA_PORT:--1}" != -1 ]; then
            start_peer_forwarders "" "$MINIBROKER_KAFKA_PEERS" MINIBROKER_KAFKA_PEERS
        fi
        exec "$@"
        ;;
esac
