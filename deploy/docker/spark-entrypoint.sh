#!/bin/sh
# The Spark image's entrypoint (run under tini): `spark-master`, `spark-worker`, or any
# other command (the audit's driver: `minibroker audit --master spark://spark-master:7077 ...`).
#
#   spark-master   Spark's standalone master: port 7077, its web UI on 8080, under the name
#                  SPARK_MASTER_HOST (the container's hostname, spark-master in compose): the
#                  name the workers and drivers use in spark://spark-master:7077.
#   spark-worker   a standalone worker of SPARK_MASTER_URL (spark://spark-master:7077) with
#                  SPARK_WORKER_CORES (2) cores and SPARK_WORKER_MEMORY (2g); web UI 8081.
#   anything else  executed as given, as a Spark driver.
#
# The worker and the driver advertise their container's address, not its hostname (a
# `compose run` container's hostname resolves nowhere): the executors connect back to the
# driver at that address, and the master reaches the worker at it.
set -eu

address="$(hostname -i 2>/dev/null | cut -d' ' -f1)"
if [ -n "$address" ]; then  # none without a network (`docker run --network none`)
    export SPARK_LOCAL_IP="$address" SPARK_LOCAL_HOSTNAME="$address"
fi
spark_class="$SPARK_HOME/bin/spark-class"

case "${1:-spark-master}" in
    spark-master)
        exec "$spark_class" org.apache.spark.deploy.master.Master \
            --host "${SPARK_MASTER_HOST:-$(hostname)}" --port 7077 --webui-port 8080
        ;;
    spark-worker)
        exec "$spark_class" org.apache.spark.deploy.worker.Worker \
            --host "${address:-$(hostname)}" --webui-port 8081 \
            --cores "${SPARK_WORKER_CORES:-2}" --memory "${SPARK_WORKER_MEMORY:-2g}" \
            "${SPARK_MASTER_URL:-spark://spark-master:7077}"
        ;;
    *)
        exec "$@"
        ;;
esac
