"""The one logging setup of every service: JSON lines, a level from settings, and the
correlation id of the data a line is about.

Every process (the five APEX services and the dashboard) calls :func:`setup_logging`
once, from :func:`apexmesh.ops.runner.run_service`, so a log collector (Loki, Elastic,
``kubectl logs | jq``) sees one shape everywhere::

    {"ts": "2026-11-25T10:00:00.123Z", "level": "WARNING", "service": "relay",
     "logger": "services.relay.router", "message": "...", "cid": "3f9a0c2d11e04b7a"}

``cid`` is the correlation id of one data: the relay that accepts a data from an
endpoint gives it one (:func:`new_correlation_id`) and sets it in
:data:`correlation_id`, a context variable, for the work done on that data; gRPC calls
made meanwhile carry it as metadata (:mod:`apexmesh.rpc.observe`) and the called
service sets it again for its handler. Every log line written while it is set carries
it, so one ``cid`` finds the data's lines in every service's log.
"""

from __future__ import annotations

import contextvars
import itertools
import logging
import secrets
import sys
import time
from collections.abc import Mapping
from typing import Any, Final

from pythonjsonlogger.json import JsonFormatter

#: The correlation id of the data the running code works on ("" for none).
correlation_id: contextvars.ContextVar[str] = contextvars.ContextVar(
    "apexmesh_correlation_id", default=""
)

#: Record attributes of the standard library that are not extra fields of a line.
_RENAMED: Final = {"levelname": "level", "name": "logger", "asctime": "ts"}


#: This process's random part of every correlation id it makes.
_PROCESS_PART: Final = secrets.token_hex(4)
#: The counted part (an iterator: the one piece of state here, shared by the process).
_numbers = itertools.count(1)


def new_correlation_id() -> str:
    """A fresh correlation id: 16 hex digits, 8 random per process and 8 counted, so
    unique across pods for a log search and cheap enough to make per message."""
    return f"{_PROCESS_PART}{next(_numbers) & 0xFFFFFFFF:08x}"


class _Context(logging.Filter):
    """Adds ``service`` and ``cid`` to every record (a filter on the handler, so that
    records of every logger, uvicorn's and grpc's included, get them)."""

    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def filter(self, record: logging.LogRecord) -> bool:
        record.service = self.service
        cid = correlation_id.get()
        if cid and not getattr(record, "cid", ""):
            record.cid = cid
        return True


class _Formatter(JsonFormatter):
    """python-json-logger with UTC timestamps in milliseconds and short names."""

    def __init__(self) -> None:
        super().__init__(
            "%(asctime)s %(levelname)s %(service)s %(name)s %(message)s",
            rename_fields=_RENAMED,
            timestamp=False,
        )

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802, ARG002
        seconds = time.gmtime(record.created)
        millis = int(record.msecs)
        return time.strftime("%Y-%m-%dT%H:%M:%S", seconds) + f".{millis:03d}Z"


def setup_logging(service: str, level: str = "INFO") -> None:
    """Send every log record of this process to stderr as one JSON line.

    Replaces whatever handlers the root logger had (a second call reconfigures).
    ``level`` comes from :func:`apexmesh.ops.settings.log_level`."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Formatter())
    handler.addFilter(_Context(service))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    # An HTTP client's line per request (the dashboard polls every service each second)
    # says nothing an operator needs; its warnings still come through.
    for chatty in ("httpx", "httpcore"):
        logging.getLogger(chatty).setLevel(logging.WARNING)
    # The asyncio debug chatter and grpc's own loggers follow the chosen level too.
    logging.captureWarnings(True)


def fields(**values: Any) -> Mapping[str, Any]:
    """Extra fields for one log call (``_log.warning("...", extra=fields(peer=...))``):
    they become keys of the JSON line."""
    return values


def failure(exc: BaseException) -> str:
    """What a log line says of ``exc``: its type and its message. Many store errors have
    no message (redis-py's ``TimeoutError()``, asyncio's), and a line that logged only
    ``str(exc)`` read "lease loop: " with nothing after it."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


__all__ = ["correlation_id", "failure", "fields", "new_correlation_id", "setup_logging"]
