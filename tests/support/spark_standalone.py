"""A Spark standalone cluster on loopback for the tests: a master and workers started from
the pyspark package's own launcher (``bin/spark-class``, the installed pyspark carries no
``sbin/start-master.sh``), each a JVM in a process group of its own, with the ports Spark
picks itself (port 0) read back from the master's log and its JSON status page.

Executors are the workers' children (``CoarseGrainedExecutorBackend``): a test finds one's
pid and directory with :meth:`StandaloneCluster.executors` to kill it. Their task log
(:data:`EXECUTOR_LOG4J`, given to executors by ``spark.executor.extraJavaOptions``) is a
file of the executor's own, written by the executor's thread before it reports a task to
the driver, so a test that stops an executor and reads the file knows for sure which
tasks it has not reported (:func:`in_flight`).

Everything started is stopped on every path (:func:`standalone_cluster`): SIGTERM to each
process group, SIGKILL after a deadline, and a wait until no process of a group runs.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import pyspark

from tests.support.polling import scaled

SPARK_HOME: Final = Path(pyspark.__file__).resolve().parent
#: Seconds a JVM gets to start and say so (a loaded two-core machine).
START_TIMEOUT: Final = 300.0
#: Seconds a stopped process group gets to go.
STOP_TIMEOUT: Final = 60.0

#: The executors' log4j2 settings: their task lines (``org.apache.spark.executor
#: .Executor``) to ``tasks.log`` in the executor's working directory, unbuffered; the
#: rest, warnings and worse, to stderr (the worker's ``stderr`` file).
EXECUTOR_LOG4J: Final = """\
rootLogger.level = warn
rootLogger.appenderRef.console.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss.SSS} %p %c{1}: %m%n
appender.tasks.type = File
appender.tasks.name = tasks
appender.tasks.fileName = tasks.log
appender.tasks.immediateFlush = true
appender.tasks.layout.type = PatternLayout
appender.tasks.layout.pattern = %m%n
logger.executor.name = org.apache.spark.executor.Executor
logger.executor.level = info
logger.executor.additivity = false
logger.executor.appenderRef.tasks.ref = tasks
"""

#: The daemons' own settings: no REST submission server (its port is fixed at 6066),
#: the workers' directories kept for the test to read.
_DAEMON_PROPERTIES: Final = "spark.master.rest.enabled false\nspark.worker.cleanup.enabled false\n"

_RUNNING: Final = re.compile(r"^Running task \S+ in stage \S+ \(TID (\d+)\)", re.MULTILINE)
_FINISHED: Final = re.compile(r"^Finished task \S+ in stage \S+ \(TID (\d+)\)", re.MULTILINE)


def _stat(pid: int) -> list[str] | None:
    """``/proc/<pid>/stat``'s fields after the command (state, ppid, pgrp, ...)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def group_alive(pgid: int) -> bool:
    """Whether a process of group ``pgid`` still runs (a zombie does not)."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat(int(entry.name))
            if fields and int(fields[2]) == pgid and fields[0] != "Z":
                return True
    return False


def stop_group(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM the process's group, SIGKILL it after :data:`STOP_TIMEOUT`; return once
    none of it runs."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        deadline = time.monotonic() + STOP_TIMEOUT
        while time.monotonic() < deadline:
            process.poll()
            if not group_alive(process.pid):
                process.wait(timeout=STOP_TIMEOUT)
                return
            time.sleep(0.05)  # poll interval
    raise RuntimeError(f"process group {process.pid} outlived SIGKILL")


def in_flight(tasks_log: Path) -> set[int]:
    """The task ids an executor has started and not reported finished (its task log)."""
    try:
        text = tasks_log.read_text(errors="replace")
    except OSError:
        return set()
    return {int(t) for t in _RUNNING.findall(text)} - {int(t) for t in _FINISHED.findall(text)}


def finished(tasks_log: Path) -> set[int]:
    """The task ids an executor has reported finished."""
    try:
        return {int(t) for t in _FINISHED.findall(tasks_log.read_text(errors="replace"))}
    except OSError:
        return set()


@dataclass(frozen=True, slots=True)
class Executor:
    pid: int
    app_id: str
    executor_id: str
    #: The executor's working directory (its ``stderr`` and ``tasks.log``).
    directory: Path

    @property
    def tasks_log(self) -> Path:
        return self.directory / "tasks.log"


@dataclass
class StandaloneCluster:
    root: Path
    env: dict[str, str]
    master_url: str = ""
    ui_url: str = ""
    master: subprocess.Popen[bytes] | None = None
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)
    work_dirs: list[Path] = field(default_factory=list)

    @property
    def executor_log4j(self) -> Path:
        """The file to name in ``spark.executor.extraJavaOptions``
        (``-Dlog4j2.configurationFile=file:<path>``)."""
        return self.root / "executor-log4j2.properties"

    def status(self) -> dict[str, Any]:
        """The master's JSON status page (workers, applications)."""
        with urllib.request.urlopen(f"{self.ui_url}/json/", timeout=scaled(10)) as answer:  # noqa: S310 - loopback http
            return json.loads(answer.read())  # type: ignore[no-any-return]

    def executors(self) -> list[Executor]:
        """The executor JVMs the workers run now."""
        workers = {w.pid: d for w, d in zip(self.workers, self.work_dirs, strict=True)}
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            fields = _stat(int(entry.name))
            if not fields or int(fields[1]) not in workers or fields[0] == "Z":
                continue
            try:
                args = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
            except OSError:
                continue
            if "org.apache.spark.executor.CoarseGrainedExecutorBackend" not in args:
                continue
            app_id = args[args.index("--app-id") + 1]
            executor_id = args[args.index("--executor-id") + 1]
            directory = workers[int(fields[1])] / app_id / executor_id
            found.append(Executor(int(entry.name), app_id, executor_id, directory))
        return sorted(found, key=lambda e: e.executor_id)

    def _start(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        with (self.root / f"{name}.log").open("ab") as log:
            return subprocess.Popen(
                [str(SPARK_HOME / "bin" / "spark-class"), *args],
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    def _await_log(self, name: str, process: subprocess.Popen[bytes], pattern: str) -> str:
        log = self.root / f"{name}.log"
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            found = re.search(pattern, log.read_text(errors="replace"))
            if found:
                return found[1]
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{name} never logged {pattern!r}:\n{log.read_text()[-4000:]}")
            time.sleep(0.1)  # poll interval

    def start(self, workers: int, cores: int, memory: str) -> None:
        properties = self.root / "daemons.properties"
        properties.write_text(_DAEMON_PROPERTIES)
        self.executor_log4j.write_text(EXECUTOR_LOG4J)
        self.master = self._start(
            "master",
            "org.apache.spark.deploy.master.Master",
            *("--host", "127.0.0.1", "--port", "0", "--webui-port", "0"),
            *("--properties-file", str(properties)),
        )
        self.master_url = self._await_log(
            "master", self.master, r"Starting Spark master at (spark://\S+)"
        )
        ui_port = self._await_log("master", self.master, r"'MasterUI' on port (\d+)")
        self.ui_url = f"http://127.0.0.1:{ui_port}"
        self._await_log("master", self.master, r"(I have been elected leader)")
        for number in range(1, workers + 1):
            work = self.root / f"worker-{number}"
            work.mkdir()
            self.work_dirs.append(work)
            self.workers.append(
                self._start(
                    f"worker-{number}",
                    "org.apache.spark.deploy.worker.Worker",
                    *("--host", "127.0.0.1", "--port", "0", "--webui-port", "0"),
                    *("--cores", str(cores), "--memory", memory, "--work-dir", str(work)),
                    *("--properties-file", str(properties), self.master_url),
                )
            )
        deadline = time.monotonic() + START_TIMEOUT
        while self.status().get("aliveworkers", 0) < workers:
            if time.monotonic() > deadline or any(w.poll() is not None for w in self.workers):
                raise RuntimeError(f"the workers did not register: {self.status()}")
            time.sleep(0.2)  # poll interval

    def stop(self) -> None:
        """Workers first (each ends its executors), then the master; every one, even
        when one outlives its SIGKILL (raised at the end)."""
        failures = []
        for process in [*self.workers, *([self.master] if self.master else [])]:
            try:
                stop_group(process)
            except RuntimeError as exc:
                failures.append(str(exc))
        if failures:
            raise RuntimeError("; ".join(failures))


@contextmanager
def standalone_cluster(
    root: Path, *, workers: int = 2, cores: int = 1, memory: str = "1g"
) -> Iterator[StandaloneCluster]:
    """A master and ``workers`` workers of ``cores`` cores and ``memory`` each, on
    loopback, logs and work directories under ``root``; stopped on every path."""
    root.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "SPARK_HOME": str(SPARK_HOME),
        # shared/ECOSYSTEM.md section 5: loopback, not the host name's address
        "SPARK_LOCAL_IP": "127.0.0.1",
        # the daemons barely compute: a small heap, the quick compiler
        "SPARK_DAEMON_MEMORY": "256m",
        "SPARK_DAEMON_JAVA_OPTS": "-XX:TieredStopAtLevel=1",
        # no conf directory of the machine's
        "SPARK_CONF_DIR": str(root / "conf"),
    }
    (root / "conf").mkdir(exist_ok=True)
    cluster = StandaloneCluster(root, env)
    try:
        cluster.start(workers, cores, memory)
        yield cluster
    finally:
        cluster.stop()


__all__ = [
    "EXECUTOR_LOG4J",
    "Executor",
    "StandaloneCluster",
    "finished",
    "group_alive",
    "in_flight",
    "standalone_cluster",
    "stop_group",
]
