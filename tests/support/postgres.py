"""A throwaway PostgreSQL cluster for tests: one per test session, a fresh database per test.

initdb + pg_ctl from Debian's postgresql package (/usr/lib/postgresql/*/bin; scripts/test.sh
installs it). PostgreSQL refuses to run as root, so as root the cluster runs as the ``postgres``
user, its data and socket directories owned by it. It listens on a unix socket only
(listen_addresses=''), trusts local connections, and is stopped at exit. :func:`get_cluster`
returns None when the binaries are absent; tests skip then, saying why.
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import itertools
import os
import pwd
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

SKIP_REASON = "PostgreSQL is not installed (/usr/lib/postgresql/*/bin/initdb): apt-get install postgresql"


def _bindir() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[4]))
    return Path(found[-1]).parent if found else None


@dataclass
class PostgresCluster:
    bindir: Path
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="clusterd-pg-")))
    _names: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    @property
    def socket_dir(self) -> Path:
        return self.root / "sock"

    @property
    def data(self) -> Path:
        return self.root / "data"

    def _run(self, *argv: str) -> None:
        prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        subprocess.run([*prefix, *argv], check=True, capture_output=True, timeout=120)

    def start(self) -> None:
        self.socket_dir.mkdir()
        if os.geteuid() == 0:
            pg = pwd.getpwnam("postgres")
            for path in (self.root, self.socket_dir):
                os.chown(path, pg.pw_uid, pg.pw_gid)
        self._run(str(self.bindir / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync")
        options = f"-k {self.socket_dir} -c listen_addresses='' -c max_connections=200"
        self._run(
            str(self.bindir / "pg_ctl"),
            "-D",
            str(self.data),
            "-l",
            str(self.root / "log"),
            "-o",
            options,
            "-w",
            "start",
        )

    def stop(self) -> None:
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.root, ignore_errors=True)

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql:///{dbname}?host={self.socket_dir}&user=postgres"

    def new_database(self) -> str:
        """A new empty database; returns its URL."""
        name = f"t{os.getpid()}_{next(self._names)}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)


_cluster: PostgresCluster | None = None


def get_cluster() -> PostgresCluster | None:
    """The session's cluster, started on first use; None when PostgreSQL is not installed."""
    global _cluster
    if _cluster is None:
        bindir = _bindir()
        if bindir is None:
            return None
        cluster = PostgresCluster(bindir)
        try:
            cluster.start()
        except BaseException:
            cluster.stop()
            raise
        atexit.register(cluster.stop)
        _cluster = cluster
    return _cluster
