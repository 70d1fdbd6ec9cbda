# The access service (services/access): gRPC 7411, admin HTTP 8411.
#
#   docker build -f docker/access.Dockerfile --build-arg BASE_IMAGE=apex-mesh/base:0.1.0 \
#     -t apex-mesh/access:0.1.0 docker/
#
# Settings come from APEXMESH_* variables (services/access/settings.py); the image binds
# loopback by default, so a deployment sets the bind hosts (the pod's address).
ARG BASE_IMAGE=apex-mesh/base:0.1.0
FROM ${BASE_IMAGE}
EXPOSE 7411 8411
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
  CMD ["python", "-m", "apexmesh.ops.probe", "access", "/readyz"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/bin/tini", "--", "python", "-m", "services.access"]
