"""``clusterd check``: everything an operator must get right before ``serve``, each checked and named.

Every check runs even after another failed (a bad tokens file does not hide an unreachable Slurm),
and each failure says what to fix. Checks only read: nothing is created and no job is submitted;
the one write is ``--storage-uri s3://...``'s probe object, deleted again at once.
"""

from __future__ import annotations

import argparse
import asyncio
import grp
import json
import logging
import os
import pwd
import secrets
import stat
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from clusterd.auth.tokens import TokenFileError, parse_tokens
from clusterd.config import Config, ConfigError, load_config
from clusterd.errors import SlurmError
from clusterd.liveness import credentials
from clusterd.security.transport import check_transport, restd_exposure, server_credentials
from clusterd.security.unixsock import socket_path
from clusterd.slurm.base import SlurmBackend
from clusterd.slurm.factory import make_backend
from clusterd.slurm.features import detect
from clusterd.slurm.version import SlurmVersion, SlurmVersionError
from clusterd.web.transport import check_web_transport

if TYPE_CHECKING:
    from clusterctl.storage import Storage

OK, WARN, FAIL = "ok", "warn", "FAIL"
_OLDEST_SLURM = (21, 8)  # the first release whose squeue/sinfo print --json


@dataclass(frozen=True)
class Finding:
    check: str
    status: str  # ok | warn | FAIL
    detail: str


class Findings(list[Finding]):
    def add(self, check: str, status: str, detail: str) -> None:
        self.append(Finding(check, status, detail))

    @property
    def failed(self) -> bool:
        return any(f.status == FAIL for f in self)


def _address(value: str, key: str, out: Findings) -> None:
    if key == "listen" and value.startswith("unix"):
        try:
            socket_path(value)
        except ConfigError as exc:
            out.add("config", FAIL, str(exc))
        return
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        out.add("config", FAIL, f"{key} must be host:port, got {value!r}")


def check_config(path: str | None) -> tuple[Config | None, Findings]:
    out = Findings()
    try:
        config = load_config(path)
        check_web_transport(config)  # a dashboard another local user could impersonate: serve refuses it too
    except ConfigError as exc:
        out.add("config", FAIL, str(exc))
        return None, out
    _address(config.listen, "listen", out)
    if config.metrics_listen:
        _address(config.metrics_listen, "metrics_listen", out)
    if config.log_format not in ("json", "text"):
        out.add("config", FAIL, f"log_format must be json or text, got {config.log_format!r}")
    if logging.getLevelName(config.log_level.upper()) not in (10, 20, 30, 40, 50):
        out.add("config", FAIL, f"log_level must be DEBUG, INFO, WARNING or ERROR, got {config.log_level!r}")
    if not out:
        out.add("config", OK, f"{path or '(defaults)'}: listen {config.listen}, state_dir {config.state_dir}")
    return config, out


def check_transport_files(config: Config, out: Findings) -> None:
    try:
        check_transport(config)
        server_credentials(config.tls)
    except ConfigError as exc:
        out.add("tls", FAIL, str(exc))
    else:
        if config.tls.cert_file:
            out.add("tls", OK, f"{'mTLS' if config.tls.client_ca_file else 'TLS'} with {config.tls.cert_file}")
        elif socket_path(config.listen) is None:
            out.add("tls", WARN, f"allow_insecure: plaintext gRPC on TCP {config.listen}: tokens are exposed")
        else:
            _check_socket(config, out)
    _check_heartbeats(config, out)
    exposure = restd_exposure(config.slurm)
    if exposure is not None and not (exposure.remote and not config.allow_insecure):  # else the FAIL above
        out.add("slurmrestd", WARN, exposure.message)


def _check_heartbeats(config: Config, out: Findings) -> None:
    """Ranks dialing TCP send their job's token: they must be able to verify the replica they reach."""
    tcp = credentials.tcp_addresses(config.liveness, config.listen) if config.liveness.enabled else []
    if not tcp:
        return
    if not config.tls.cert_file:
        out.add(
            "heartbeats",
            WARN,
            f"jobs beat in plaintext to {', '.join(tcp)}: their tokens cross the network "
            "([tls] and liveness.heartbeat_ca_file)",
        )
    elif not config.liveness.heartbeat_ca_file:
        out.add(
            "heartbeats",
            FAIL,
            f"jobs beat over TLS to {', '.join(tcp)} but are given no CA to verify it: "
            "set liveness.heartbeat_ca_file to the CA's path as the compute nodes see it",
        )
    elif config.tls.client_ca_file:
        out.add(
            "heartbeats",
            WARN,
            "mTLS: ranks have no client certificate, so their beats are refused; "
            "give them a listener without client certificates in liveness.heartbeat_addr",
        )
    else:
        out.add(
            "heartbeats",
            OK,
            f"jobs beat over TLS to {', '.join(tcp)}, verified with {config.liveness.heartbeat_ca_file}",
        )


def _check_socket(config: Config, out: Findings) -> None:
    """The unix socket's group and directory, as far as they can be judged without creating them."""
    path = Path(socket_path(config.listen) or "")
    group = config.socket_group
    if group:
        try:
            members = grp.getgrnam(group).gr_mem
        except KeyError:
            out.add(
                "socket",
                FAIL,
                f"socket_group {group!r} does not exist: groupadd {group}, then add the users allowed to call clusterd",
            )
            return
        who = f"group {group} ({len(members)} listed members)"
    else:
        who = "clusterd's own user only (socket_group is empty)"
    try:
        st = path.parent.lstat()
    except FileNotFoundError:
        out.add("socket", OK, f"{path}: for {who}; {path.parent} will be created {'0750' if group else '0700'}")
        return
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        out.add(
            "socket",
            FAIL,
            f"{path.parent} is not a directory owned by uid {os.geteuid()}: another user "
            "could replace the socket; remove it",
        )
        return
    out.add("socket", OK, f"{path}: for {who}")


def check_tokens(config: Config, out: Findings) -> None:
    path = Path(config.tokens_file)
    try:
        st = path.stat()
        entries = parse_tokens(path.read_text(), str(path))
    except OSError as exc:
        out.add("tokens", FAIL, f"cannot read tokens file {path}: {exc.strerror}")
        return
    except TokenFileError as exc:
        out.add("tokens", FAIL, str(exc))
        return
    if not entries:
        out.add("tokens", FAIL, f"{path}: no [[token]] entries: nobody can call the service (clusterd token add)")
        return
    unknown = sorted({e.user for e in entries if not _unix_user(e.user)})
    if unknown:
        out.add("tokens", FAIL, f"{path}: no Unix account for {', '.join(unknown)}: their jobs could not run")
        return
    if st.st_mode & 0o077:
        out.add("tokens", WARN, f"{path} is readable by group/others (mode {stat.S_IMODE(st.st_mode):o}): chmod 600")
    plain = sorted({e.user for e in entries if e.plaintext})
    if plain:
        out.add("tokens", WARN, f"{path}: plaintext tokens for {', '.join(plain)}: re-add with clusterd token add")
    admins = sum(e.admin for e in entries)
    out.add("tokens", OK, f"{len(entries)} tokens for {len({e.user for e in entries})} users ({admins} admin)")


def _unix_user(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def _writable_dir(path: Path) -> str | None:
    """Why ``path`` cannot be used as a directory we write into, or None when it can."""
    probe = path
    while not probe.exists():
        if probe.parent == probe:
            return f"{path}: no existing parent"
        probe = probe.parent
    if not probe.is_dir():
        return f"{probe} is not a directory"
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"{probe} is not writable by uid {os.geteuid()}"
    return None


def check_paths(config: Config, out: Findings) -> None:
    problems = [p for p in (_writable_dir(Path(config.state_dir)), _writable_dir(config.audit_path.parent)) if p]
    if (root := _writable_dir(Path(config.slurm.job_root))) is not None:
        problems.append(f"slurm.job_root: {root}")
    if Path(config.slurm.job_root).is_relative_to(config.state_dir):
        problems.append(
            f"slurm.job_root {config.slurm.job_root} is inside state_dir {config.state_dir}, which is "
            "0700: jobs running as their users could not reach it; move one of them"
        )
    missing = [d for d in config.slurm.job_path.split(":") if d and not Path(d).is_dir()]
    if missing:
        problems.append(f"slurm.job_path: {', '.join(missing)} not a directory")
    if config.slurm.slurm_conf and not Path(config.slurm.slurm_conf).is_file():
        problems.append(f"slurm.slurm_conf: {config.slurm.slurm_conf} does not exist")
    if problems:
        for problem in problems:
            out.add("paths", FAIL, problem)
    else:
        out.add("paths", OK, f"state {config.state_dir}, audit {config.audit_path}, jobs {config.slurm.job_root}")


def _backend_label(config: Config) -> str:
    """The backend in use, and that ``auto`` chose it: ``slurmrestd (auto)``."""
    chosen = config.slurm.chosen_backend
    return chosen if chosen == config.slurm.backend else f"{chosen} ({config.slurm.backend})"


async def check_slurm(config: Config, out: Findings, backend: SlurmBackend | None = None) -> None:
    try:
        backend = backend or make_backend(config.slurm)
    except ConfigError as exc:
        out.add("slurm", FAIL, str(exc))
        return
    try:
        version = await backend.version()
        nodes = await backend.list_nodes()
        partitions = await backend.partitions()
        switches = await backend.topology()
    except SlurmError as exc:  # SlurmUnavailable included: the message says which command and why
        out.add("slurm", FAIL, f"{_backend_label(config)} backend: {exc}")
        return
    try:
        release = SlurmVersion.parse(version)
    except SlurmVersionError:
        release = None  # an unfamiliar version string is not a reason to refuse
    if release is not None and release.release < _OLDEST_SLURM:
        out.add("slurm", FAIL, f"Slurm {version} is too old: JSON output needs 21.08 or newer")
        return
    if config.slurm.default_partition and config.slurm.default_partition not in partitions:
        out.add(
            "slurm",
            FAIL,
            f"slurm.default_partition {config.slurm.default_partition!r} is not one of {', '.join(partitions)}",
        )
        return
    usable = sum(n.state.usable for n in nodes)
    api = f" (JSON/REST {release.data_parser})" if release is not None else ""
    out.add(
        "slurm",
        OK,
        f"Slurm {version}{api} via {_backend_label(config)}: {len(nodes)} nodes ({usable} usable), "
        f"partitions {', '.join(partitions)}, {len(switches)} switches",
    )
    if not usable:
        out.add("slurm", WARN, "no node is usable now: jobs will pend")
    try:
        features = await detect(config.slurm, backend)
    except SlurmError as exc:
        out.add("slurm-features", WARN, f"could not read the release's options: {exc}")
    else:
        out.add("slurm-features", OK, f"Slurm {features.version}: " + "; ".join(features.describe()))


def check_storage(uris: list[str], out: Findings) -> None:
    """One LIST per URI with the service's own credentials (the supervisor reads commit markers so)."""
    from clusterctl.checkpoint.gc import latest_committed
    from clusterctl.storage import StorageError, open_storage

    if not uris:
        import boto3

        if boto3.Session().get_credentials() is None:
            out.add(
                "storage",
                WARN,
                "no AWS credentials in the environment: progress of s3:// jobs cannot be "
                "read (restart decisions fall back to restart counts)",
            )
        else:
            out.add("storage", OK, "AWS credentials found (pass --storage-uri to probe a bucket)")
        return
    for uri in uris:
        try:
            storage = open_storage(uri)
            try:
                step = latest_committed(storage)
                refusal = conditional_put_refusal(storage) if uri.startswith("s3://") else None
            finally:
                storage.close()
        except (StorageError, ValueError, OSError) as exc:
            out.add("storage", FAIL, f"{uri}: {exc}")
            continue
        if refusal is not None:
            out.add("storage", FAIL, f"{uri}: {refusal}")
            continue
        out.add(
            "storage",
            OK,
            f"{uri}: readable, newest committed step {step if step is not None else 'none'}"
            f"{', If-None-Match enforced' if uri.startswith('s3://') else ''}",
        )


def conditional_put_refusal(storage: Storage) -> str | None:
    """Why the server does not make ``If-None-Match: *`` puts exclusive, or None when it does.

    A checkpoint step is committed by one marker put with ``If-None-Match: *``; a server that
    ignores the header lets two writers both believe they committed. The checkpoint manager's own
    probe (clusterctl.storage.conditional), on a fresh object under the prefix, deleted afterwards.
    """
    from clusterctl.storage.conditional import create_only_refusal

    refusal = create_only_refusal(storage, f".clusterd-check-{secrets.token_hex(8)}")
    return None if refusal is None else f"{refusal}: concurrent checkpoint commits would not be detected"


async def run_checks(path: str | None, storage_uris: list[str], backend: SlurmBackend | None = None) -> Findings:
    config, out = check_config(path)
    if config is None:
        return out
    check_transport_files(config, out)
    check_tokens(config, out)
    check_paths(config, out)
    await check_slurm(config, out, backend)
    await asyncio.to_thread(check_storage, storage_uris, out)
    return out


def render(findings: Findings) -> str:
    width = max(len(f.check) for f in findings)
    return "\n".join(f"{f.status:<4}  {f.check:<{width}}  {f.detail}" for f in findings)


def _main(args: argparse.Namespace) -> int:
    logging.getLogger().setLevel(logging.ERROR)  # the findings are the output; library chatter is not
    findings = asyncio.run(run_checks(args.config, args.storage_uri or []))
    if args.json:
        print(json.dumps([asdict(f) for f in findings], indent=2))
    else:
        print(render(findings))
        print("\nclusterd check: " + ("FAILED" if findings.failed else "all checks passed"), file=sys.stderr)
    return 1 if findings.failed else 0


def add_check_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("check", help="validate config, tokens, TLS files, Slurm and storage; change nothing")
    parser.add_argument("--config", help="TOML config file (env: CLUSTERD_CONFIG)")
    parser.add_argument(
        "--storage-uri",
        action="append",
        metavar="URI",
        help="a checkpoint URI to probe with the service's credentials (repeatable)",
    )
    parser.add_argument("--json", action="store_true", help="print findings as JSON")
    parser.set_defaults(func=_main)
