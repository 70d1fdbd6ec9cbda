"""TLS and SASL material reloaded while the relay runs (no restart, sessions kept).

cert-manager renews the relay's certificate into its Secret, and an operator adds an
endpoint's password to the SASL Secret (``apexctl credentials add``); the kubelet then
swaps the mounted files (an atomic symlink change of the volume's ``..data``). The relay
reads those files once at start, so without this module neither change would take effect
until every pod restarted, dropping every session.

:class:`MaterialWatcher` keeps a fingerprint (SHA-256 of the contents) of each group of
files and looks at them every ``APEXMESH_RELAY_RELOAD_SECONDS`` and on SIGHUP (or
``POST /admin/v1/reload``):

* ``tls``: the certificate and key (``APEXMESH_RELAY_TLS_CERT`` / ``_KEY``), read into a
  new :class:`ssl.SSLContext` that every connection accepted afterwards uses; sessions
  already tuned keep the context they negotiated with;
* ``ca``: the CA bundle that verifies other domains' relays (``APEXMESH_RELAY_TLS_CA``),
  used by the apex-mesh links opened afterwards;
* ``sasl``: the ``identity:password`` file (``APEXMESH_RELAY_SASL_FILE``), whose new
  store answers every SASL exchange started afterwards. Authenticated sessions stay:
  SASL authenticates a session once (RFC 4422 section 3.8), so a removed password ends
  no session; close it with ``apexctl sessions kill`` if it must go.

A change that cannot be used (a key that does not match the certificate, a half-written
file, a malformed credentials line, an empty credentials file outside a development run)
keeps the material in use, is logged at ERROR and counted
(``apexmesh_relay_material_reloads_total{material, result="failed"}``) once per content;
the next change of the files is tried again. A good change is logged at INFO and
counted with ``result="ok"``; ``apexmesh_relay_material_loaded_timestamp_seconds`` says
when each group was last loaded.

The watcher only builds and hands over: the composition root
(services/relay/app.py) says where each new piece goes.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import hashlib
import logging
import ssl
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography import x509
from prometheus_client import CollectorRegistry, Counter, Gauge

from apexmesh.aio.tasks import stop_task, within
from apexmesh.beep.sasl import StaticCredentials
from apexmesh.beep.sasl.credentials import ScramKeys
from apexmesh.ops.settings import SettingsError
from services.relay.settings import read_credentials

_log = logging.getLogger(__name__)


class Material(enum.StrEnum):
    """The groups of files watched, each reloaded as a whole."""

    TLS = "tls"
    CA = "ca"
    SASL = "sasl"


class ReloadableCredentials:
    """The relay's credential store: one :class:`StaticCredentials` at a time, replaced
    whole when the credentials file changes (exchanges in progress finish against the
    store they started with; the lookups of one exchange come from one store)."""

    def __init__(self, store: StaticCredentials) -> None:
        self.current = store

    def lookup(self, username: str) -> str | None:
        return self.current.lookup(username)

    def scram_keys(self, username: str) -> ScramKeys | None:
        return self.current.scram_keys(username)


def server_context(cert: Path, key: Path) -> ssl.SSLContext:
    """The relay's TLS server context for ``cert`` and ``key`` (raises on a mismatch)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    return context


def client_context(ca: Path) -> ssl.SSLContext:
    """The context apex-mesh links verify other domains' relays with."""
    return ssl.create_default_context(cafile=str(ca))


@dataclass(frozen=True, slots=True)
class Watched:
    """One group: its files, how to build from them and where the result goes."""

    material: Material
    files: tuple[Path, ...]
    build: Callable[[], Any]
    apply: Callable[[Any], None]
    describe: Callable[[Any], str]


@dataclass(slots=True)
class _State:
    loaded: str = ""
    #: The content last refused (so one bad file is logged once, not every poll).
    refused: str = ""
    loaded_at: float = field(default_factory=time.time)
    error: str = ""


class MaterialWatcher:
    """Polls the watched files and reloads what changed (see the module docstring)."""

    def __init__(
        self,
        watched: Sequence[Watched],
        registry: CollectorRegistry,
        *,
        interval: float,
    ) -> None:
        self._watched = tuple(watched)
        self._interval = interval
        self._states = {w.material: _State(loaded=_fingerprint(w.files)) for w in watched}
        self._reloads = Counter(
            "apexmesh_relay_material_reloads",
            "Reloads of TLS and SASL material, by material (tls, ca, sasl) and result "
            "(ok, failed: the material in use is kept).",
            ["material", "result"],
            registry=registry,
        )
        self._loaded = Gauge(
            "apexmesh_relay_material_loaded_timestamp_seconds",
            "When each group of TLS and SASL material in use was loaded (Unix time).",
            ["material"],
            registry=registry,
        )
        for w in watched:
            self._loaded.labels(w.material.value).set(self._states[w.material].loaded_at)
            for result in ("ok", "failed"):
                self._reloads.labels(w.material.value, result)
        self._wake = asyncio.Event()
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None

    @property
    def materials(self) -> tuple[Material, ...]:
        return tuple(w.material for w in self._watched)

    def start(self) -> None:
        """Start polling (every interval; SIGHUP or :meth:`trigger` at once)."""
        if self._watched and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="reload")

    async def close(self) -> None:
        await stop_task(self._task)
        self._task = None

    def trigger(self) -> None:
        """Look at the files now (the SIGHUP handler)."""
        _log.info("reload requested")
        self._wake.set()

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await within(self._wake.wait(), self._interval or None)
            self._wake.clear()
            try:
                await self.check()
            except Exception:  # noqa: BLE001  (never stop watching)
                _log.exception("reload check failed")

    async def check(self) -> dict[str, str]:
        """Reload every group whose files changed; return each group's result
        (``unchanged``, ``reloaded`` or ``failed: why``)."""
        results: dict[str, str] = {}
        async with self._lock:
            for watched in self._watched:
                results[watched.material.value] = await self._check_one(watched)
        return results

    async def _check_one(self, watched: Watched) -> str:
        state = self._states[watched.material]
        seen = await asyncio.to_thread(_fingerprint, watched.files)
        if seen == state.loaded:
            return "unchanged"
        if seen == state.refused:
            return f"failed: {state.error}"
        name = watched.material.value
        try:
            built = await asyncio.to_thread(watched.build)
            watched.apply(built)
        except (OSError, ValueError, ssl.SSLError, SettingsError) as exc:
            state.refused, state.error = seen, _why(exc)
            self._reloads.labels(name, "failed").inc()
            _log.error(
                "cannot reload %s from %s: %s; keeping the %s loaded at %s",
                name,
                ", ".join(map(str, watched.files)),
                state.error,
                name,
                _rfc3339(state.loaded_at),
            )
            return f"failed: {state.error}"
        state.loaded, state.refused, state.error = seen, "", ""
        state.loaded_at = time.time()
        self._reloads.labels(name, "ok").inc()
        self._loaded.labels(name).set(state.loaded_at)
        _log.info("reloaded %s: %s", name, watched.describe(built))
        return "reloaded"

    def state(self) -> dict[str, dict[str, Any]]:
        """What ``/admin/v1/info`` says about each group."""
        return {
            material.value: {
                "fingerprint": state.loaded[:16],
                "loaded_at": _rfc3339(state.loaded_at),
                "error": state.error,
            }
            for material, state in self._states.items()
        }


def credentials_store(path: Path, *, allow_empty: bool) -> tuple[dict[str, str], StaticCredentials]:
    """Read a credentials file and derive its SCRAM verifiers (run in a thread: the
    derivation costs milliseconds per identity)."""
    passwords = read_credentials(path)
    if not passwords and not allow_empty:
        raise SettingsError(f"{path}: no credentials (an empty file would lock every endpoint out)")
    return passwords, StaticCredentials(passwords)


def not_after(cert: Path) -> str:
    """The notAfter of the first certificate of a PEM file, RFC 3339."""
    served = x509.load_pem_x509_certificate(cert.read_bytes())
    return _rfc3339(served.not_valid_after_utc.timestamp())


def _fingerprint(files: Sequence[Path]) -> str:
    """SHA-256 over the files' contents; a missing file has its own fingerprint."""
    digest = hashlib.sha256()
    for path in files:
        try:
            digest.update(path.read_bytes())
        except OSError as exc:
            digest.update(f"\0unreadable {path}: {exc.errno}".encode())
        digest.update(b"\0")
    return digest.hexdigest()


def _why(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLError):
        return f"{exc.reason or exc.__class__.__name__} ({exc.library or 'ssl'})"
    return str(exc) or exc.__class__.__name__


def _rfc3339(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


__all__ = [
    "Material",
    "MaterialWatcher",
    "ReloadableCredentials",
    "Watched",
    "client_context",
    "credentials_store",
    "not_after",
    "server_context",
]
