# The presence service (services/presence): gRPC 7413, admin HTTP 8413.
#
#   docker build -f docker/presence.Dockerfile --build-arg BASE_IMAGE=apex-mesh/base:0.1.0 \
#     -t apex-mesh/presence:0.1.0 docker/
#
# Settings come from APEXMESH_* variables (services/presence/settings.py); the image binds
# loopback by default, so a deployment sets the bind hosts (the pod's address).
ARG BASE_IMAGE=apex-mesh/base:0.1.0
FROM ${BASE_IMAGE}
EXPOSE 7413 8413
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
  CMD ["python", "-m", "apexmesh.ops.probe", "presence", "/readyz"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/bin/tini", "--", "python", "-m", "services.presence"]
