#!/usr/bin/env bash
# A Spark executor in a pod of Spark on Kubernetes (the snapshot job with a k8s:// master,
# docs/snapshot.md). Spark starts executor pods from the job's image with the argument
# "executor" and its settings in SPARK_* variables; that image's entrypoint runs the job,
# so the chart's executor pod template runs this script instead. It does what the
# entrypoint of Spark's own images does for an executor, with pip's pyspark as Spark.
set -euo pipefail

spark_home="${SPARK_HOME:-$(python -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')}"

# Spark hands the executor's JVM options over as SPARK_JAVA_OPT_0, _1, ... in order.
mapfile -t java_opts < <(env | grep '^SPARK_JAVA_OPT_' | sort -t_ -k4 -n | sed 's/^[^=]*=//')

exec java "${java_opts[@]}" \
    -Xms"${SPARK_EXECUTOR_MEMORY}" -Xmx"${SPARK_EXECUTOR_MEMORY}" \
    -cp "${spark_home}/jars/*" \
    org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
    --driver-url "${SPARK_DRIVER_URL}" \
    --executor-id "${SPARK_EXECUTOR_ID}" \
    --cores "${SPARK_EXECUTOR_CORES}" \
    --app-id "${SPARK_APPLICATION_ID}" \
    --hostname "${SPARK_EXECUTOR_POD_IP}" \
    --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID}" \
    --podName "${SPARK_EXECUTOR_POD_NAME}"
