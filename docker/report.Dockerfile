# The report service (services/report): gRPC 7412, admin HTTP 8412.
#
#   docker build -f docker/report.Dockerfile --build-arg BASE_IMAGE=apex-mesh/base:0.1.0 \
#     -t apex-mesh/report:0.1.0 docker/
#
# Settings come from APEXMESH_* variables (services/report/settings.py); the image binds
# loopback by default, so a deployment sets the bind hosts (the pod's address).
ARG BASE_IMAGE=apex-mesh/base:0.1.0
FROM ${BASE_IMAGE}
EXPOSE 7412 8412
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
  CMD ["python", "-m", "apexmesh.ops.probe", "report", "/readyz"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/bin/tini", "--", "python", "-m", "services.report"]
