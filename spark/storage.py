"""The job's storage: a local directory (a PVC in the chart), ``file://`` or ``s3a://``.

Spark reads and writes it by URL (Hadoop's file systems: S3A when ``hadoop-aws`` is on
the cluster's classpath). The driver's own small files (exported event ranges, the
manifest, the ``_SUCCESS`` marker, listings and retention) go through pyarrow's file
systems, which speak local paths and S3 (``s3a://b/p`` is ``s3://b/p`` there), so the
job needs no Hadoop call from Python.

For ``s3a://`` both sides must reach the same store: the S3A settings of the job's Spark
settings (``spark.hadoop.fs.s3a.endpoint``, ``.endpoint.region``, ``.path.style.access``,
``.connection.ssl.enabled``) also configure the driver's pyarrow S3 (:func:`s3_options`),
and both take the credentials from the environment (``AWS_ACCESS_KEY_ID`` and
``AWS_SECRET_ACCESS_KEY``, from a Secret in the chart).

Atomicity the job relies on: a file becomes visible whole. Locally a file is written
under a temporary name and renamed (POSIX rename); on S3 one object PUT is atomic and a
temporary object is never listed as data (its name starts with ``.tmp-``).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pyarrow.fs as pafs

_S3A: Final = "spark.hadoop.fs.s3a."


def s3_options(conf: Iterable[tuple[str, str]]) -> tuple[tuple[str, Any], ...]:
    """pyarrow ``S3FileSystem`` arguments from Spark's S3A settings (module docstring);
    none when the settings name no endpoint, region or path style (AWS's defaults)."""
    settings = {k.removeprefix(_S3A): v for k, v in conf if k.startswith(_S3A)}
    options: dict[str, Any] = {}
    endpoint = settings.get("endpoint", "")
    if endpoint:
        scheme, found, rest = endpoint.partition("://")
        if found:
            options["scheme"], options["endpoint_override"] = scheme, rest.rstrip("/")
        else:
            ssl = settings.get("connection.ssl.enabled", "true").lower() != "false"
            options["scheme"], options["endpoint_override"] = ("https" if ssl else "http"), endpoint
        # S3A addresses buckets by host name unless told otherwise; pyarrow does only
        # without an endpoint of its own, unless forced
        path_style = settings.get("path.style.access", "false").lower() == "true"
        options["force_virtual_addressing"] = not path_style
    if settings.get("endpoint.region"):
        options["region"] = settings["endpoint.region"]
    return tuple(sorted(options.items()))


def _split(url: str, s3: tuple[tuple[str, Any], ...] = ()) -> tuple[pafs.FileSystem, str]:
    if url.startswith("s3a://"):
        path = url.removeprefix("s3a://").rstrip("/")
        if s3:
            return pafs.S3FileSystem(**dict(s3)), path
        filesystem, path = pafs.FileSystem.from_uri(f"s3://{path}")
        return filesystem, path
    local = url.removeprefix("file://")
    return pafs.LocalFileSystem(), str(Path(local).resolve())


@dataclass(frozen=True, slots=True)
class Storage:
    """The job's storage root; paths below are relative to it. ``s3`` holds the
    pyarrow S3 arguments for an ``s3a://`` root (:func:`s3_options`)."""

    url: str
    s3: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def configured(cls, url: str, conf: Iterable[tuple[str, str]]) -> Storage:
        """The storage at ``url`` as the job's Spark settings ``conf`` reach it."""
        return cls(url, s3_options(conf) if url.startswith("s3a://") else ())

    @property
    def _fs(self) -> tuple[pafs.FileSystem, str]:
        return _split(self.url, self.s3)

    def spark_url(self, relative: str) -> str:
        """What Spark is given: ``file:`` URLs locally, ``s3a://`` as configured."""
        if self.url.startswith("s3a://"):
            return f"{self.url}/{relative}"
        return "file://" + f"{_split(self.url)[1]}/{relative}"

    def path(self, relative: str) -> str:
        """The pyarrow path of ``relative`` (for reading Parquet in the driver)."""
        return f"{self._fs[1]}/{relative}"

    @property
    def filesystem(self) -> pafs.FileSystem:
        return self._fs[0]

    def mkdirs(self, relative: str) -> None:
        filesystem, root = self._fs
        filesystem.create_dir(f"{root}/{relative}", recursive=True)

    def exists(self, relative: str) -> bool:
        filesystem, root = self._fs
        return bool(filesystem.get_file_info(f"{root}/{relative}").type != pafs.FileType.NotFound)

    def list(self, relative: str) -> list[str]:
        """Names directly under ``relative`` (none when it does not exist), sorted."""
        filesystem, root = self._fs
        selector = pafs.FileSelector(f"{root}/{relative}", allow_not_found=True)
        return sorted(info.base_name for info in filesystem.get_file_info(selector))

    def write_bytes(self, relative: str, data: bytes) -> None:
        """Write a whole file, visible only once complete (temporary name, then rename)."""
        filesystem, root = self._fs
        target = f"{root}/{relative}"
        parent, _, name = target.rpartition("/")
        filesystem.create_dir(parent, recursive=True)
        temporary = f"{parent}/.tmp-{uuid.uuid4().hex}-{name}"
        with filesystem.open_output_stream(temporary) as out:
            out.write(data)
        filesystem.move(temporary, target)

    def temporary(self, relative: str) -> str:
        """A temporary path beside ``relative`` for a writer that streams (moved into
        place by :meth:`publish`)."""
        parent, _, name = self.path(relative).rpartition("/")
        self.filesystem.create_dir(parent, recursive=True)
        return f"{parent}/.tmp-{uuid.uuid4().hex}-{name}"

    def publish(self, temporary: str, relative: str) -> None:
        self.filesystem.move(temporary, self.path(relative))

    def read_json(self, relative: str) -> Any:
        filesystem, root = self._fs
        with filesystem.open_input_stream(f"{root}/{relative}") as stream:
            return json.loads(stream.read())

    def write_json(self, relative: str, value: object) -> None:
        self.write_bytes(relative, json.dumps(value, indent=2, sort_keys=True).encode() + b"\n")

    def delete(self, relative: str) -> None:
        """Delete a file or a directory tree (nothing when absent)."""
        filesystem, root = self._fs
        target = f"{root}/{relative}"
        kind = filesystem.get_file_info(target).type
        if kind == pafs.FileType.Directory:
            filesystem.delete_dir(target)
        elif kind == pafs.FileType.File:
            filesystem.delete_file(target)


__all__ = ["Storage", "s3_options"]
