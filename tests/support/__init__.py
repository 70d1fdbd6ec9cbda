"""Reusable test harness: real redis-server, real service processes, readiness probes."""
