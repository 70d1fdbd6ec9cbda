# The Spark snapshot job (issue #21: `python -m spark.snapshot`): the base image plus a
# Java 17 runtime and PySpark, run in local mode inside the CronJob's pod, or as the driver
# and the executors of Spark on Kubernetes (docker/spark-executor.sh).
#
#   docker build -f docker/spark.Dockerfile --build-arg BASE_IMAGE=apex-mesh/base:0.1.0 \
#     -t apex-mesh/spark:0.1.0 docker/
#
# Same user as every image (UID 10001, with a passwd entry: Hadoop's login module refuses
# a UID without a name); the chart's CronJob runs as that UID.
ARG BASE_IMAGE=apex-mesh/base:0.1.0

# --------------------------------------------------------------------------- build
FROM ${BASE_IMAGE} AS build
# hadolint ignore=DL3002
USER 0
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3-pip \
 && rm -rf /var/lib/apt/lists/*
# The pins of pyproject's "spark" extra: PySpark, and pyarrow for the driver's own files
# (the exported event ranges, manifests, reading the snapshot back for Redis).
ARG PYSPARK_VERSION=4.3.0
ARG PYARROW_SPEC="pyarrow>=18,<27"
ARG PIP_OPTIONS=""
# hadolint ignore=SC2086
RUN /usr/bin/python3 -m pip --python /opt/apex-mesh/bin/python install --no-cache-dir \
      --disable-pip-version-check ${PIP_OPTIONS} "pyspark==${PYSPARK_VERSION}" "${PYARROW_SPEC}"

# --------------------------------------------------------------------------- spark
FROM ${BASE_IMAGE}
USER 0
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /opt/apex-mesh /opt/apex-mesh
# Spark on Kubernetes: what the chart's executor pod template runs (the entrypoint below
# runs the job itself).
COPY spark-executor.sh /usr/local/bin/apex-mesh-spark-executor
# Local mode on loopback (no hostname lookup, no UI port); scratch space under /tmp, which
# the chart mounts as an emptyDir (the root filesystem is read-only).
ENV SPARK_LOCAL_IP=127.0.0.1 \
    SPARK_LOCAL_DIRS=/tmp/spark \
    PYSPARK_PYTHON=/opt/apex-mesh/bin/python
USER 10001:10001
ENTRYPOINT ["/usr/bin/tini", "--", "python", "-m", "spark.snapshot"]
