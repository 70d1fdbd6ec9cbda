# The one base every apex-mesh image starts from: Debian 12's Python
# 3.11, the project and its dependencies in a virtualenv, a non-root user with a passwd
# entry. Build it first; each service's Dockerfile is a few lines on top of it.
#
#   docker build -f docker/base.Dockerfile -t apex-mesh/base:0.1.0 .
#
# DEBIAN_IMAGE: any Debian 12 image (debian:bookworm-slim, or one made locally with
# debootstrap and `docker import`, as scripts/containers does).
# PIP_OPTIONS: extra pip arguments, e.g. "--no-index --find-links http://127.0.0.1:8000/"
# to install from a local wheelhouse instead of the package index.
ARG DEBIAN_IMAGE=debian:bookworm-slim

# --------------------------------------------------------------------------- runtime
FROM ${DEBIAN_IMAGE} AS runtime
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# python3: Debian 12's 3.11, the version the project targets; tini: PID 1 that forwards
# SIGTERM to the service (which drains gracefully) and reaps children (Spark's JVM).
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates python3 tini \
 && rm -rf /var/lib/apt/lists/*
# A fixed UID with a passwd entry: Kubernetes' runAsUser must match it, and Spark (Hadoop's
# login module) fails for a UID that has no name.
ARG APEX_UID=10001
RUN groupadd --system --gid "${APEX_UID}" apex \
 && useradd --system --uid "${APEX_UID}" --gid apex --home-dir /home/apex --create-home \
      --shell /usr/sbin/nologin apex
ENV PATH=/opt/apex-mesh/bin:${PATH} \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/home/apex

# --------------------------------------------------------------------------- build
FROM runtime AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3-venv \
 && rm -rf /var/lib/apt/lists/*
# The context is what .dockerignore lets through: pyproject.toml, constraints.txt (the
# versions the suite passed with, as scripts/install takes them), README.md, the packages
# (apexmesh, services, spark).
COPY . /src
ARG PIP_OPTIONS=""
# hadolint ignore=SC2086
RUN python3 -m venv /opt/apex-mesh \
 && /opt/apex-mesh/bin/pip install --no-cache-dir --disable-pip-version-check ${PIP_OPTIONS} \
      -c /src/constraints.txt /src \
 && /opt/apex-mesh/bin/pip uninstall -y --disable-pip-version-check pip setuptools \
 && /opt/apex-mesh/bin/python -m compileall -q /opt/apex-mesh/lib

# --------------------------------------------------------------------------- base
FROM runtime AS base
COPY --from=build /opt/apex-mesh /opt/apex-mesh
WORKDIR /home/apex
USER 10001:10001
