# The web dashboard (services/dashboard): HTTP 8420 (the page, its server-sent events,
# /healthz, /readyz, /metrics).
#
#   docker build -f docker/dashboard.Dockerfile --build-arg BASE_IMAGE=apex-mesh/base:0.1.0 \
#     -t apex-mesh/dashboard:0.1.0 docker/
#
# Settings come from APEXMESH_DASHBOARD_* variables (services/dashboard/settings.py): the
# context file naming the services it reads, the login token, the bind host (loopback by
# default, so a deployment sets the pod's address).
ARG BASE_IMAGE=apex-mesh/base:0.1.0
FROM ${BASE_IMAGE}
EXPOSE 8420
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
  CMD ["python", "-m", "apexmesh.ops.probe", "dashboard", "/readyz"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/bin/tini", "--", "python", "-m", "services.dashboard"]
