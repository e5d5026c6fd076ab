#!/usr/bin/env bash
# The Docker cluster's commands behind `make up`, `make up-ha`, `make down` and
# `make down-volumes`.
#
#   deploy/docker/compose.sh up             start (image built by `make image`), wait for health
#   deploy/docker/compose.sh down           stop and remove the containers and the network
#   deploy/docker/compose.sh down-volumes   the same and the data volumes
#   deploy/docker/compose.sh ARGS...        any compose command on the project (ps, logs, ...)
#
# Uses `docker compose` (v2) when present, else `docker-compose` (v1), always with the fixed
# project name $MINIBROKER_PROJECT (default minibroker) and deploy/docker-compose.yml (plus
# deploy/docker-compose.override.yml when it exists).
#
# Two variants: one ZooKeeper (the default), or with MINIBROKER_ZOOKEEPER_NODES=3 (`make
# up-ha`) a 3-node ensemble, deploy/docker-compose.ha.yml on top of docker-compose.yml.
# Only `up` needs to be told; the other commands find the variant that runs (by its
# <project>-zookeeper-1 container), and `down`/`down-volumes` remove either.
#
# With MINIBROKER_METRICS=1 (`make up-metrics`), `up` also starts the "metrics" profile: a
# Prometheus scraping the brokers, on 127.0.0.1:$MINIBROKER_PROMETHEUS_PORT (9090). `down`
# and `down-volumes` remove it whether or not it was asked for.
#
# With MINIBROKER_SPARK=1 (`make up-spark`), `up` also starts the "spark" profile: Spark's
# standalone master and a worker mounting the brokers' data volumes read-only; the master's
# UI on 127.0.0.1:$MINIBROKER_SPARK_UI_PORT (8080). `deploy/docker/compose.sh audit [ARGS]`
# (`make audit-spark`) then runs the audit's driver in a one-off container on that master,
# over the three brokers' data, reports to $MINIBROKER_AUDIT_REPORT_DIR (./audit-report);
# ARGS are more `minibroker audit` options. One ZooKeeper only (the HA variant's brokers
# keep their data in other volumes).
#
# With MINIBROKER_TLS=1 (`make up-tls`), the authenticated variant (deploy/docker-compose.tls.yml,
# one ZooKeeper): `up` first makes a throw-away CA, the brokers' and an admin certificate, the
# ZooKeeper digest and admin.properties in $MINIBROKER_TLS_DIR (./minibroker-tls), once.
#
# Environment: MINIBROKER_PROJECT, MINIBROKER_ZOOKEEPER_NODES (1 or 3), MINIBROKER_PORT_1..3
# (9091..9093), MINIBROKER_KAFKA_PORT_1..3 (the Kafka protocol listeners', 19091..19093;
# SASL_SSL in the TLS variant),
# MINIBROKER_ZOOKEEPER_PORT (2181; with 3 nodes also MINIBROKER_ZOOKEEPER_PORT_2
# and _3, 2182 and 2183), MINIBROKER_UP_TIMEOUT (seconds to wait for health, 180; a failed
# health check is not final before it),
# MINIBROKER_COMPOSE_OVERRIDE (an override file, deploy/docker-compose.override.yml),
# MINIBROKER_OVERRIDES and the others listed in deploy/docker-compose.yml.
set -euo pipefail

cd "$(dirname "$0")/../.."
export MINIBROKER_PROJECT="${MINIBROKER_PROJECT:-minibroker}"
project="$MINIBROKER_PROJECT"
compose_file=deploy/docker-compose.yml
ha_file=deploy/docker-compose.ha.yml
command="${1:-}"

die() { echo "make ${command:-up}: $*" >&2; exit 1; }

# The variant: what `up` is asked for; for the other commands, what runs (or ran).
# Containers are looked up with `docker container inspect`: a bare `docker inspect NAME`
# also matches an image of that name (minibroker-prometheus is one), which would switch a
# profile on in every later `make up`.
if [ "$command" = up ]; then
    nodes="${MINIBROKER_ZOOKEEPER_NODES:-1}"
    case "$nodes" in
        1 | 3) ;;
        *) die "MINIBROKER_ZOOKEEPER_NODES must be 1 (one ZooKeeper) or 3 (an ensemble), not '$nodes'" ;;
    esac
elif [ "${MINIBROKER_ZOOKEEPER_NODES:-}" = 3 ] \
    || docker container inspect "$project-zookeeper-1" >/dev/null 2>&1; then
    nodes=3
else
    nodes=1
fi
if [ "$nodes" = 3 ]; then
    services=(zookeeper zookeeper-2 zookeeper-3 broker-1 broker-2 broker-3)
    volumes=(zookeeper-1-data zookeeper-2-data zookeeper-3-data
        ha-broker-1-data ha-broker-2-data ha-broker-3-data)
else
    services=(zookeeper broker-1 broker-2 broker-3)
    volumes=(zookeeper-data broker-1-data broker-2-data broker-3-data)
fi

if docker compose version >/dev/null 2>&1; then
    compose=(docker compose)
elif command -v docker-compose >/dev/null 2>&1; then
    compose=(docker-compose)
else
    die "neither \`docker compose\` (v2) nor \`docker-compose\` (v1) is installed"
fi
compose+=(-p "$project" -f "$compose_file")
metrics="${MINIBROKER_METRICS:-0}"
case "$metrics" in
    0 | 1) ;;
    *) die "MINIBROKER_METRICS must be 0 or 1 (a Prometheus scraping the brokers), not '$metrics'" ;;
esac
if [ "$metrics" = 1 ] || [ "$command" = down ] || [ "$command" = down-volumes ] \
    || docker container inspect "$project-prometheus" >/dev/null 2>&1; then
    compose+=(--profile metrics)
fi
if [ "$metrics" = 1 ]; then
    services+=(prometheus)
fi
spark="${MINIBROKER_SPARK:-0}"
case "$spark" in
    0 | 1) ;;
    *) die "MINIBROKER_SPARK must be 0 or 1 (Spark's master and a worker for the audit), not '$spark'" ;;
esac
if [ "$command" = audit ]; then
    spark=1
fi
if [ "$spark" = 1 ] && [ "$nodes" = 3 ]; then
    die "the spark profile audits the one-ZooKeeper cluster's volumes: unset MINIBROKER_ZOOKEEPER_NODES"
fi
if [ "$spark" = 1 ] || [ "$command" = down ] || [ "$command" = down-volumes ] \
    || docker container inspect "$project-spark-master" >/dev/null 2>&1; then
    compose+=(--profile spark)
fi
# The audit's one-off driver has a profile of its own, so that no `up` starts it (it would
# exit at once and stay behind as <project>_audit_1, its report bind-mount made by root).
if [ "$command" = audit ] || [ "$command" = down ] || [ "$command" = down-volumes ]; then
    compose+=(--profile audit)
fi
# Where `make audit-spark` writes its reports; absolute, so that compose never resolves the
# default against deploy/ (and mounted at the same path in the container, so that the
# paths the audit prints are the host's).
report_dir="${MINIBROKER_AUDIT_REPORT_DIR:-$PWD/audit-report}"
case "$report_dir" in /*) ;; *) report_dir="$PWD/$report_dir" ;; esac
export MINIBROKER_AUDIT_REPORT_DIR="$report_dir"
if [ "$spark" = 1 ] && [ "$command" = up ]; then
    services+=(spark-master spark-worker)
fi
# `down` with both files removes the containers and volumes of either variant.
if [ "$nodes" = 3 ] || [ "$command" = down ] || [ "$command" = down-volumes ]; then
    compose+=(-f "$ha_file")
fi
# The TLS variant: asked for, or running (its brokers carry a keystore setting).
tls="${MINIBROKER_TLS:-0}"
case "$tls" in
    0 | 1) ;;
    *) die "MINIBROKER_TLS must be 0 or 1 (the authenticated cluster), not '$tls'" ;;
esac
if [ "$tls" = 0 ] && [ "$command" != up ] \
    && docker container inspect -f '{{range .Config.Env}}{{println .}}{{end}}' "$project-broker-1" 2>/dev/null \
    | grep -q '^MINIBROKER_CFG_SSL_KEYSTORE_LOCATION='; then
    tls=1
fi
if [ "$tls" = 1 ] && [ "$nodes" = 3 ] && [ "$command" = up ]; then
    die "the TLS variant runs on one ZooKeeper: unset MINIBROKER_ZOOKEEPER_NODES"
fi
tls_dir="${MINIBROKER_TLS_DIR:-$PWD/minibroker-tls}"
case "$tls_dir" in /*) ;; *) tls_dir="$PWD/$tls_dir" ;; esac
export MINIBROKER_TLS_DIR="$tls_dir"
if [ "$tls" = 1 ] || [ "$command" = down ] || [ "$command" = down-volumes ]; then
    compose+=(-f deploy/docker-compose.tls.yml)
fi
# A local override file (per-broker settings, more services), as compose itself would read
# one next to the compose file if it were not given -f; MINIBROKER_COMPOSE_OVERRIDE names
# another.
override="${MINIBROKER_COMPOSE_OVERRIDE:-deploy/docker-compose.override.yml}"
if [ -f "$override" ]; then
    compose+=(-f "$override")
elif [ -n "${MINIBROKER_COMPOSE_OVERRIDE:-}" ]; then
    die "MINIBROKER_COMPOSE_OVERRIDE names $override, which is not a file"
fi

# In the HA variant the `zookeeper` service is node 1 of the ensemble, and named so.
container_of() {
    if [ "$1" = zookeeper ] && [ "$nodes" = 3 ]; then
        echo "$project-zookeeper-1"
    else
        echo "$project-$1"
    fi
}

ports() {
    echo "zookeeper ${MINIBROKER_ZOOKEEPER_PORT:-2181} MINIBROKER_ZOOKEEPER_PORT"
    if [ "$nodes" = 3 ]; then
        echo "zookeeper-2 ${MINIBROKER_ZOOKEEPER_PORT_2:-2182} MINIBROKER_ZOOKEEPER_PORT_2"
        echo "zookeeper-3 ${MINIBROKER_ZOOKEEPER_PORT_3:-2183} MINIBROKER_ZOOKEEPER_PORT_3"
    fi
    echo "broker-1 ${MINIBROKER_PORT_1:-9091} MINIBROKER_PORT_1"
    echo "broker-2 ${MINIBROKER_PORT_2:-9092} MINIBROKER_PORT_2"
    echo "broker-3 ${MINIBROKER_PORT_3:-9093} MINIBROKER_PORT_3"
    # The Kafka listeners (SASL_SSL in the TLS variant).
    echo "broker-1 ${MINIBROKER_KAFKA_PORT_1:-19091} MINIBROKER_KAFKA_PORT_1"
    echo "broker-2 ${MINIBROKER_KAFKA_PORT_2:-19092} MINIBROKER_KAFKA_PORT_2"
    echo "broker-3 ${MINIBROKER_KAFKA_PORT_3:-19093} MINIBROKER_KAFKA_PORT_3"
    if [ "$metrics" = 1 ]; then
        echo "prometheus ${MINIBROKER_PROMETHEUS_PORT:-9090} MINIBROKER_PROMETHEUS_PORT"
    fi
    if [ "$spark" = 1 ]; then
        echo "spark-master ${MINIBROKER_SPARK_UI_PORT:-8080} MINIBROKER_SPARK_UI_PORT"
    fi
}

bootstrap() {
    echo "127.0.0.1:${MINIBROKER_PORT_1:-9091},127.0.0.1:${MINIBROKER_PORT_2:-9092},127.0.0.1:${MINIBROKER_PORT_3:-9093}"
}

# The brokers' Kafka protocol listeners, for kcat, aiokafka, confluent-kafka.
kafka_bootstrap() {
    echo "127.0.0.1:${MINIBROKER_KAFKA_PORT_1:-19091},127.0.0.1:${MINIBROKER_KAFKA_PORT_2:-19092},127.0.0.1:${MINIBROKER_KAFKA_PORT_3:-19093}"
}

zookeeper_connect() {
    local connect="127.0.0.1:${MINIBROKER_ZOOKEEPER_PORT:-2181}"
    if [ "$nodes" = 3 ]; then
        connect+=",127.0.0.1:${MINIBROKER_ZOOKEEPER_PORT_2:-2182}"
        connect+=",127.0.0.1:${MINIBROKER_ZOOKEEPER_PORT_3:-2183}"
    fi
    if [ "$tls" = 1 ]; then
        connect+="/minibroker"
    fi
    echo "$connect"
}

# The TLS variant's files, made once with the image's own Python (deploy/tls_certs.py), as
# the invoking user so that the host's CLI can read the admin certificate; the brokers run
# as root and read theirs through the read-only /tls mount.
make_tls_files() {
    if [ -f "$tls_dir/ca.pem" ] && [ -f "$tls_dir/admin.properties" ]; then
        echo "make up: reusing the TLS files in $tls_dir" >&2
        make_kafka_client_properties
        return
    fi
    mkdir -p "$tls_dir"
    docker run --rm --network none --user "$(id -u):$(id -g)" -v "$tls_dir:/tls" \
        -e "PROJECT=$project" --entrypoint /opt/minibroker/bin/python \
        "${MINIBROKER_IMAGE:-minibroker:latest}" -c '
import os, secrets
from pathlib import Path
from deploy.tls_certs import generate
hosts = ["%s-broker-%d" % (os.environ["PROJECT"], i) for i in (1, 2, 3)]
generate(Path("/tls"), [1, 2, 3], hosts, clients=("admin",))
fd = os.open("/tls/zookeeper-digest", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
os.write(fd, ("minibroker:%s\n" % secrets.token_urlsafe(24)).encode())
os.close(fd)
' 2>&1 || die "could not make the TLS files in $tls_dir"
    umask 077
    cat >"$tls_dir/admin.properties" <<EOF
security.protocol=SSL
ssl.truststore.location=$tls_dir/ca.pem
ssl.keystore.location=$tls_dir/admin.pem
zookeeper.set.acl=true
zookeeper.auth.digest.file=$tls_dir/zookeeper-digest
EOF
    echo "make up: made a throw-away CA, certificates and the ZooKeeper digest in $tls_dir" >&2
    make_kafka_client_properties
}

# The Kafka clients' settings (librdkafka's names, `kcat -F`): SASL_SSL as the SCRAM user
# admin, whose password is made here once; add_kafka_admin writes its credentials.
make_kafka_client_properties() {
    [ -f "$tls_dir/kafka-client.properties" ] && return
    (
        umask 077
        cat >"$tls_dir/kafka-client.properties" <<EOF
security.protocol=SASL_SSL
sasl.mechanisms=SCRAM-SHA-256
sasl.username=admin
sasl.password=$(head -c 18 /dev/urandom | base64 | tr '+/' '-_')
ssl.ca.location=$tls_dir/ca.pem
EOF
    )
}

# The SCRAM credentials of the Kafka user admin, in ZooKeeper (docs/security.md), with the
# host's minibroker command and the cluster's digest: the password never leaves the host.
add_kafka_admin() {
    local password
    password="$(sed -n 's/^sasl.password=//p' "$tls_dir/kafka-client.properties")"
    .venv/bin/minibroker configs --zookeeper "$(zookeeper_connect)" \
        --command-config "$tls_dir/admin.properties" --alter --entity-type users \
        --entity-name admin \
        --add-config "SCRAM-SHA-256=[password=$password],SCRAM-SHA-512=[password=$password]" \
        >/dev/null || die "could not write the Kafka user admin's SCRAM credentials"
}

# A port is taken when something on the host accepts connections on 127.0.0.1:<port> and
# it is not this project's own running container (a second `make up` is fine).
port_taken() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# The make target of this variant, for the advice.
target() {
    if [ "$nodes" = 3 ]; then echo up-ha
    elif [ "$tls" = 1 ]; then echo up-tls
    elif [ "$metrics" = 1 ]; then echo up-metrics
    elif [ "$spark" = 1 ]; then echo up-spark
    else echo up
    fi
}

# Every port of this run is checked; each one taken is named, and the advice suggests for
# each a port above it that is free now and not another of this run's ports (nor another
# suggestion).
check_ports() {
    local service port variable published candidate
    local -a taken=() suggestions=()
    local -A used=()
    while read -r service port variable; do
        used[$port]=1
    done < <(ports)
    while read -r service port variable; do
        published="$(docker port "$(container_of "$service")" 2>/dev/null || true)"
        if grep -q "127.0.0.1:$port\$" <<<"$published"; then
            continue
        fi
        if port_taken "$port"; then
            taken+=("$port ($variable, $service)")
            candidate=$((port + 1))
            while [ "$candidate" -le 65535 ] \
                && { [ -n "${used[$candidate]:-}" ] || port_taken "$candidate"; }; do
                candidate=$((candidate + 1))
            done
            used[$candidate]=1
            suggestions+=("$variable=$candidate")
        fi
    done < <(ports)
    [ "${#taken[@]}" -eq 0 ] && return 0
    local list
    printf -v list ', %s' "${taken[@]}"
    list="${list#, }"
    if [ "${#taken[@]}" = 1 ]; then
        echo "make up: port $list is already taken on 127.0.0.1 by another program" >&2
    else
        echo "make up: ports $list are already taken on 127.0.0.1 by other programs" >&2
    fi
    die "stop what holds them (\`ss -ltnp\` names it) or choose other ports, e.g." \
        "${suggestions[*]} make $(target)"
}

# healthy / starting / unhealthy while it runs; "exited (exit code N)" once it stopped.
health() {
    docker container inspect -f '{{if ne .State.Status "running"}}{{.State.Status}} (exit code {{.State.ExitCode}}){{else if .State.Health}}{{.State.Health.Status}}{{else}}running{{end}}' \
        "$1" 2>/dev/null || echo missing
}
state() { docker container inspect -f '{{.State.Status}}' "$1" 2>/dev/null || echo missing; }

report_unhealthy() {
    "${compose[@]}" ps >&2 || true
    local service container status
    for service in "${services[@]}"; do
        container="$(container_of "$service")"
        status="$(health "$container")"
        if [ "$status" != healthy ]; then
            echo >&2
            echo "---- $service ($container): $status; last health check:" >&2
            health_log "$container" | tail -n 3 >&2 || true
            echo "---- logs of $service:" >&2
            "${compose[@]}" logs --no-color --tail=60 "$service" >&2 || true
        fi
    done
}

# Compose names some containers by id (`Container "d177bca44a3c" is unhealthy`): say their
# names instead.
name_containers() {
    local text id name pairs
    text="$(cat)"
    pairs="$(docker ps -a --no-trunc --filter "label=com.docker.compose.project=$project" \
        --format '{{.ID}} {{.Names}}' 2>/dev/null || true)"
    while read -r id name; do
        [ -n "$id" ] || continue
        text="${text//$id/$name}"
        text="${text//${id:0:12}/$name}"
    done <<<"$pairs"
    printf '%s\n' "$text"
}

# What the container's recent health checks printed, oldest first.
health_log() {
    docker container inspect -f '{{if .State.Health}}{{range .State.Health.Log}}{{.Output}}{{end}}{{end}}' \
        "$1" 2>/dev/null
}

last_check() {
    health_log "$1" | grep -v '^$' | tail -n 1 || true
}

any_unhealthy() {
    local service
    for service in "${services[@]}"; do
        [ "$(health "$(container_of "$service")")" = unhealthy ] && return 0
    done
    return 1
}

# `compose up -d`, then wait until every service is healthy, for MINIBROKER_UP_TIMEOUT
# seconds in all. A failed health check is not final while the timeout runs (a loaded
# machine makes checks time out): an unhealthy container is waited for, and when compose
# itself gives up on a dependency that is unhealthy for now (ZooKeeper for the brokers, the
# Spark master for the worker), `up -d` is asked again until the rest is started. Only a
# container that stopped is final at once (`restart: "no"`). Every failure prints the report.
wait_healthy() {
    local start=$up_start timeout="${MINIBROKER_UP_TIMEOUT:-180}"
    local started=0 told_up=0 output remaining service container status
    local -a pending
    local -A told=()
    echo "make up: starting; waiting for ZooKeeper and the brokers to be healthy (at most ${timeout} s)" >&2
    while :; do
        remaining=$((timeout - (SECONDS - start)))
        # Compose is asked again once nothing it started is unhealthy any more (it would stop
        # at the same dependency again).
        if [ "$started" = 0 ] && [ "$remaining" -gt 0 ] \
            && { [ "$told_up" = 0 ] || ! any_unhealthy; }; then
            if output="$(timeout "$remaining" "${compose[@]}" up -d --no-build --remove-orphans 2>&1)"; then
                started=1
                name_containers <<<"$output" >&2
            elif grep -qi 'is unhealthy' <<<"$output"; then
                if [ "$told_up" = 0 ]; then
                    name_containers <<<"$output" >&2
                    echo "make up: compose stopped at a dependency that is not healthy yet;" \
                        "asking it again until the timeout" >&2
                    told_up=1
                fi
            elif [ $((SECONDS - start)) -ge "$timeout" ]; then
                name_containers <<<"$output" >&2 # timed out inside compose: the report below
            else
                name_containers <<<"$output" >&2
                report_unhealthy
                die "compose could not start the cluster (its message is above); \`make down\` cleans up"
            fi
        fi
        pending=()
        for service in "${services[@]}"; do
            container="$(container_of "$service")"
            status="$(health "$container")"
            [ "$status" = healthy ] && continue
            pending+=("$service ($container): $status")
            case "$status" in
                exited* | dead* | removing*)
                    echo "make up: $service ($container) is $status" >&2
                    report_unhealthy
                    die "the cluster did not come up ($service, container $container: $status);" \
                        "\`make down\` cleans up"
                    ;;
                unhealthy)
                    if [ -z "${told[$service]:-}" ]; then
                        output="$(last_check "$container")"
                        echo "make up: $service ($container) is unhealthy for now${output:+ ($output)};" \
                            "waiting for it" >&2
                        told[$service]=1
                    fi
                    ;;
            esac
        done
        [ "$started" = 1 ] && [ "${#pending[@]}" -eq 0 ] && return 0
        if [ $((SECONDS - start)) -ge "$timeout" ]; then
            if [ "${#pending[@]}" -eq 0 ]; then
                pending=("compose did not finish starting the cluster")
            fi
            printf -v output '; %s' "${pending[@]}"
            echo "make up: not healthy after ${timeout} s: ${output#; }" >&2
            report_unhealthy
            die "the cluster did not become healthy in ${timeout} s (MINIBROKER_UP_TIMEOUT);" \
                "\`make down\` cleans up"
        fi
        sleep 1
    done
}

# This variant's named volumes left by an earlier `make up` (compose names them
# <project>_<volume>). Compose creates every volume the files name, so the other variant's,
# unused here, may exist too: only this variant's count.
existing_volumes() {
    local volume
    for volume in "${volumes[@]}"; do
        if docker volume inspect "${project}_$volume" >/dev/null 2>&1; then
            echo "${project}_$volume"
        fi
    done
}

up() {
    docker info >/dev/null 2>&1 || die "no Docker engine answers (is dockerd running, may you use it?)"
    docker image inspect "${MINIBROKER_IMAGE:-minibroker:latest}" >/dev/null 2>&1 \
        || die "image ${MINIBROKER_IMAGE:-minibroker:latest} is missing: run \`make image\` (\`make up\` does)"
    if [ "$nodes" = 1 ] && docker container inspect "$project-zookeeper-1" >/dev/null 2>&1; then
        die "project $project has containers of the 3-node ZooKeeper variant (\`make up-ha\`): \`make down\` first"
    fi
    if [ "$nodes" = 3 ] && docker container inspect "$project-zookeeper" >/dev/null 2>&1; then
        die "project $project has containers of the 1-node ZooKeeper variant (\`make up\`): \`make down\` first"
    fi
    check_ports
    if [ "$tls" = 1 ]; then
        make_tls_files
    fi
    local existing
    existing="$(existing_volumes | sort | tr '\n' ' ')"
    if [ -n "$existing" ]; then
        echo "make up: reusing data volumes from an earlier run (${existing% }): its topics," \
            "records and ZooKeeper state are still there; \`make down-volumes\` first to start empty" >&2
    else
        echo "make up: new, empty data volumes" >&2
    fi
    up_start=$SECONDS
    wait_healthy
    local servers zk what=ZooKeeper
    servers="$(bootstrap)"
    zk="$(zookeeper_connect)"
    local security="" export_config="" kafka="" kcat=""
    if [ "$nodes" = 3 ]; then
        what="A ZooKeeper ensemble of 3"
    fi
    if [ "$tls" = 1 ]; then
        add_kafka_admin
        security="
  security:          TLS + ZooKeeper ACLs; client properties $tls_dir/admin.properties
  kafka bootstrap:   $(kafka_bootstrap) (SASL_SSL, SCRAM user admin: $tls_dir/kafka-client.properties)"
        export_config=" MINIBROKER_COMMAND_CONFIG=$tls_dir/admin.properties"
        kcat="
  kcat -b $(kafka_bootstrap) -F $tls_dir/kafka-client.properties -L"
    else
        kafka="
  kafka bootstrap:   $(kafka_bootstrap)"
        kcat="
  kcat -b $(kafka_bootstrap) -L                     # Kafka's tools, on the Kafka ports"
    fi
    cat <<EOF
make up: $what and 3 brokers are healthy after $((SECONDS - up_start)) s (project $project).

  bootstrap servers: $servers$kafka
  zookeeper:         $zk$security

Next:
$(cli_line)
  export MINIBROKER_BOOTSTRAP=$servers MINIBROKER_ZOOKEEPER=$zk$export_config
  minibroker topics create orders --partitions 3 --replication-factor 3
  seq 1000 | minibroker produce orders --acks all
  minibroker consume orders --from-beginning --timeout-ms 5000
  minibroker topics describe orders$kcat
  docker kill $project-broker-1; docker start $project-broker-1    # a crash and a restart
EOF
    if [ "$nodes" = 3 ]; then
        cat <<EOF
  docker kill $project-zookeeper-1; docker start $project-zookeeper-1  # one ZooKeeper node
  minibroker cluster status --project $project       # each ZooKeeper node's mode
EOF
    fi
    if [ "$metrics" = 1 ]; then
        cat <<EOF
  # Prometheus: http://127.0.0.1:${MINIBROKER_PROMETHEUS_PORT:-9090}/graph
  curl -s 'http://127.0.0.1:${MINIBROKER_PROMETHEUS_PORT:-9090}/api/v1/query?query=kafka_server_replicamanager_underreplicatedpartitions'
EOF
    fi
    if [ "$spark" = 1 ]; then
        cat <<EOF
  # Spark master: http://127.0.0.1:${MINIBROKER_SPARK_UI_PORT:-8080}; the audit of the brokers' logs in place:
  make audit-spark       # reports in ./audit-report (MINIBROKER_AUDIT_REPORT_DIR)
EOF
    fi
    cat <<EOF
  make down              # stop (data kept); make down-volumes also drops the data
EOF
}

# The first of the next steps: the minibroker command, in the venv that `make up` installs
# it in (`make cli`; `make setup` installs the tests' and the audit's extras too).
cli_line() {
    if [ -x .venv/bin/minibroker ]; then
        echo "  . .venv/bin/activate              # the minibroker command (installed by make up)"
    else
        echo "  make cli && . .venv/bin/activate  # the minibroker command"
    fi
}

# The audit's driver in a one-off container of the spark profile, on the running master,
# over the brokers' data volumes (mounted read-only at /data/broker-N). Its exit status is
# `minibroker audit`'s: 0 clean, 1 violations, 2 bad input.
audit() {
    docker container inspect -f '{{.State.Running}}' "$project-spark-master" 2>/dev/null | grep -q true \
        || die "no Spark master runs in project $project: \`make up-spark\` first"
    # Made here, as the invoking user: a directory Docker makes for a bind mount is root's.
    mkdir -p "$report_dir"
    local status=0
    "${compose[@]}" run --rm --no-deps audit \
        minibroker audit --master spark://spark-master:7077 \
        --data /data/broker-1 /data/broker-2 /data/broker-3 --report "$report_dir" "$@" \
        || status=$?
    echo "make audit-spark: the reports are in $report_dir" >&2
    return "$status"
}

# The anonymous volumes of the project's containers: the minibroker image declares VOLUME
# /data, which the prometheus and spark images inherit and on which their services mount no
# named volume, so Docker gives each such container one. `compose down` keeps them unless
# told --volumes (which drops the named data volumes too): `down` removes them itself.
anonymous_volumes() {
    local ids
    ids="$(docker ps -aq --filter "label=com.docker.compose.project=$project" 2>/dev/null || true)"
    [ -n "$ids" ] || return 0
    # shellcheck disable=SC2086 # one argument per container id
    docker container inspect -f '{{range .Mounts}}{{if eq .Type "volume"}}{{println .Name}}{{end}}{{end}}' \
        $ids 2>/dev/null | grep -E '^[0-9a-f]{64}$' | sort -u || true
}

down() {
    local anonymous
    anonymous="$(anonymous_volumes)"
    "${compose[@]}" down --remove-orphans "$@"
    if [ -n "$anonymous" ]; then
        # shellcheck disable=SC2086 # one argument per volume
        docker volume rm $anonymous >/dev/null
    fi
}

case "$command" in
    up) up ;;
    audit) shift; audit "$@" ;;
    down) down ;;
    down-volumes) down --volumes ;;
    "") die "usage: $0 up|down|down-volumes|audit [AUDIT-ARGS...]|COMPOSE-ARGS..." ;;
    *) "${compose[@]}" "$@" ;;
esac
