"""clusterd configuration: a TOML file, overridden by CLUSTERD_* environment variables, then flags.

One dataclass tree sizes every bound in the service, so limits are found in one place.
"""

from __future__ import annotations

import math
import os
import shlex
import tomllib
from dataclasses import dataclass, field, fields, is_dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit


class ConfigError(ValueError):
    """The configuration file or an override is wrong; the message says which key."""


@dataclass(frozen=True)
class SlurmConfig:
    backend: str = "commands"  # commands | slurmrestd | pyslurm | auto (see chosen_backend)
    slurm_conf: str = ""  # exported as SLURM_CONF to every Slurm command when set
    bin_dir: str = ""  # where sbatch & co live; empty = PATH
    default_partition: str = ""
    job_root: str = "/var/lib/clusterd-jobs"  # per-user working dirs <job_root>/<user>; not in the 0700 state_dir
    job_path: str = ""  # PATH jobs start with; empty = the service's own PATH
    command_timeout_seconds: float = 30.0
    signal_before_timeout_seconds: int = 120
    # slurmrestd backend: base URL (http://host:6820 or unix:///run/slurmrestd.sock), the OpenAPI
    # version to speak (empty = newest the server offers that we know), and how to authenticate:
    # the cluster's HS256 JWT key (clusterd signs a short-lived token per user, so jobs run as
    # that user) or, failing that, a file holding one token (every call then acts as its user).
    restd_url: str = ""
    restd_ca_file: str = ""  # PEM CA that signed slurmrestd's certificate (https://); empty = system CAs
    restd_api_version: str = ""
    jwt_key_file: str = ""
    jwt_token_file: str = ""
    jwt_lifetime_seconds: int = 600

    @property
    def chosen_backend(self) -> str:
        """The backend ``backend`` names; ``auto`` is slurmrestd when ``restd_url`` is set, else commands.

        ``auto`` never picks pyslurm: no real-Slurm test covers it (it is used only when named).
        """
        if self.backend != "auto":
            return self.backend
        return "slurmrestd" if self.restd_url else "commands"


@dataclass(frozen=True)
class LimitsConfig:
    max_script_bytes: int = 1 << 20
    max_message_bytes: int = 4 << 20
    max_env_vars: int = 256
    max_env_value_bytes: int = 32 << 10
    max_nodes: int = 4096
    max_watchers: int = 1000
    max_watchers_per_user: int = 100  # WatchJobs streams one user may hold; 0 = only max_watchers
    watch_queue_size: int = 1000
    list_default_limit: int = 1000
    max_jobs_per_user: int = 1000  # queued + running tasks (array tasks count) one user may hold; 0 = unlimited
    max_spec_bytes_per_user: int = 1 << 30  # job spec bytes one user's records hold; 0 = unlimited
    max_finished_per_user: int = 1000  # finished records kept per user, oldest pruned first; 0 = unlimited
    finished_retention_seconds: float = 7 * 24 * 3600.0  # finished records older than this are pruned
    prune_interval_seconds: float = 600.0  # how often retention runs in the background
    requests_per_second: float = 50.0  # per-user token bucket refill; 0 = unlimited
    burst: int = 200  # per-user token bucket size (calls allowed at once after idling)


@dataclass(frozen=True)
class TLSConfig:
    """TLS on a TCP ``listen``; empty ``cert_file`` = no TLS, which only a unix socket (or allow_insecure) permits.

    ``client_ca_file`` turns on mTLS: every client must present a certificate signed by it.
    ``cn_user_map`` is ``"CN=user,CN2=user2:admin"``: a client whose verified certificate CN is
    listed authenticates as that user without a bearer token.
    """

    cert_file: str = ""
    key_file: str = ""
    client_ca_file: str = ""
    cn_user_map: str = ""


@dataclass(frozen=True)
class RestartDefaults:
    max_restarts: int = 3
    on_node_failure: bool = True
    on_preemption: bool = True
    on_time_limit: bool = True
    retryable_exit_codes: tuple[int, ...] = ()
    fatal_exit_codes: tuple[int, ...] = (86,)  # 86: the documented "do not requeue me" code
    backoff_seconds: float = 0.0
    exclude_failed_nodes: bool = True
    no_progress_limit: int = 3
    on_rank_failure: bool = True  # a rank of a multi-rank job crashed or hung while its node stayed up


@dataclass(frozen=True)
class SupervisorConfig:
    """Bounds of the checkpoint-progress reader (clusterd.supervisor.progress), per job and read.

    A job's checkpoint prefix is its user's to fill: past these bounds its progress is unknown
    (logged once, retried after ``progress_retry_seconds``), and no other job or poll waits for it.
    """

    progress_read_seconds: float = 5.0  # time budget of one read of one job's commit markers
    progress_max_keys: int = 1_000  # entries one read may list under commits/ (retention keeps a handful)
    progress_interval_seconds: float = 10.0  # between reads of one running job
    progress_retry_seconds: float = 300.0  # after a read over budget or failing
    progress_workers: int = 4  # reads in flight at once, all jobs together


@dataclass(frozen=True)
class LivenessConfig:
    """Failure detection from the jobs themselves (clusterd.liveness), ahead of Slurm's SlurmdTimeout.

    Each rank's client library beats every ``heartbeat_interval_seconds``; a rank silent for
    ``suspect_after_intervals`` intervals makes its node a suspect, and the node is probed
    (slurmd's port, ``probe_timeout_seconds``, with ICMP echo beside it, confirmed once more): a
    refusing port, or neither port nor host answering, is a dead node; a node that is up while the
    rank stays silent for the job's hang timeout is a hung rank (that job alone is restarted).

    Progress: ranks that beat but whose step has not moved for ``progress_hang_factor`` times their
    recent step time (at least ``progress_hang_floor_seconds``) are hung too; their stacks are asked
    for first. A node whose ranks take ``straggler_factor`` times the other nodes' median step time,
    over ``straggler_window_steps`` steps, is named a straggler.

    Across jobs: a node that failed ``health_jobs_to_drain`` (at least 2: a smaller value counts
    as 2) different jobs within ``health_window_seconds``, in as many events 60 s apart, at least
    one of them a node death clusterd confirmed itself, is drained when ``drain_failing_nodes``.
    Hang and straggler claims alone never drain (liveness.health).

    A node clusterd drained is probed ``health_probe_interval_seconds`` after the drain, and again
    as long as it fails, by ``health_probe_command`` run on it through Slurm in a maintenance
    reservation of clusterd's own user (liveness.repair); a probe that passes returns it to service.
    """

    enabled: bool = True
    # What jobs dial to reach clusterd; empty = the listen address when it is a unix socket (jobs
    # on other machines need a TCP address here), else heartbeats stay off.
    heartbeat_addr: str = ""
    # The CA (PEM) that signs the replicas' [tls] certificates, at a path the compute nodes read: put
    # in the jobs' environment as CLUSTERCTL_CA, so ranks beat over verified TLS to TCP addresses.
    heartbeat_ca_file: str = ""
    heartbeat_interval_seconds: float = 1.0
    suspect_after_intervals: float = 2.0
    hang_timeout_seconds: float = 30.0
    probe_timeout_seconds: float = 1.0
    check_every_seconds: float = 0.25
    progress_hang_factor: float = 10.0  # 0: ranks that beat are never hung for not advancing
    progress_hang_floor_seconds: float = 300.0
    straggler_factor: float = 1.3  # 0: no straggler verdicts
    straggler_window_steps: int = 20
    drain_failing_nodes: bool = True
    health_window_seconds: float = 3600.0
    health_jobs_to_drain: int = 2
    health_event_seconds: float = 60.0  # failures on one node this close in time are one event
    # The operator's command (an argv, run on a node clusterd drained, through Slurm): exit 0 returns
    # the node to service. Empty: no probe, a drained node waits for the operator.
    health_probe_command: tuple[str, ...] = ()
    health_probe_interval_seconds: float = 600.0  # after the drain, and between failing probes
    health_probe_timeout_seconds: float = 300.0  # the probe's run on the node (its Slurm time limit)
    # Restart a job without its straggler node (--exclude, or in place on a spare) when the straggler
    # costs more over the job's remaining time limit than a restart measured for that job.
    evict_stragglers: bool = False

    def __post_init__(self) -> None:
        for name in ("health_event_seconds", "health_probe_interval_seconds", "health_probe_timeout_seconds"):
            value = getattr(self, name)
            if not math.isfinite(value) or value <= 0:
                raise ConfigError(f"liveness.{name}: expected a finite number of seconds > 0, got {value!r}")


@dataclass(frozen=True)
class GoodputConfig:
    """The checkpoint interval autopilot (clusterd.goodput.autopilot): Young/Daly, bounded."""

    interval_floor_seconds: float = 30.0  # never advise saving more often
    interval_ceiling_seconds: float = 6 * 3600.0  # never advise saving less often
    # A node never seen failing is taken to fail once per this long (the prior of its rate).
    prior_node_mtbf_seconds: float = 7 * 24 * 3600.0
    failure_window_seconds: float = 30 * 24 * 3600.0  # failures older than this are forgotten

    def __post_init__(self) -> None:
        for name in (
            "interval_floor_seconds",
            "interval_ceiling_seconds",
            "prior_node_mtbf_seconds",
            "failure_window_seconds",
        ):
            value = getattr(self, name)
            if not math.isfinite(value) or value <= 0:
                raise ConfigError(f"goodput.{name}: expected a finite number of seconds > 0, got {value!r}")
        if self.interval_floor_seconds > self.interval_ceiling_seconds:
            raise ConfigError(
                "goodput.interval_floor_seconds: must not exceed goodput.interval_ceiling_seconds "
                f"({self.interval_floor_seconds} > {self.interval_ceiling_seconds})"
            )


@dataclass(frozen=True)
class ViewsConfig:
    """What users may see of jobs beyond their records: logs, history, the whole queue, checkpoints."""

    # `list --all` / ListQueue: everyone's jobs with squeue's public fields, as squeue shows them;
    # false shows each user their own only, as slurm.conf's PrivateData=jobs does (read at start).
    public_queue: bool = True
    accounting: str = "auto"  # auto: history also asks Slurm accounting (sacct) when slurmdbd is there | off
    history_default_days: float = 7.0  # the time window of `history` without --since
    max_tail_lines: int = 100_000  # `logs --tail N` bound
    log_chunk_bytes: int = 64 << 10  # bytes per ReadJobLog message
    follow_interval_seconds: float = 0.5  # how often `logs -f` looks for appended output
    # The interpreter the setpriv'd opener of output files runs as the job's user (stdlib only):
    # empty = /usr/bin/python3, else clusterd's own.
    reader_python: str = ""
    checkpoint_list_seconds: float = 10.0  # time budget of listing one job's checkpoints
    checkpoint_verify_max_bytes: int = 1 << 30  # the newest step is verified (read back) up to this size
    checkpoint_cache_seconds: float = 30.0  # a job's checkpoint listing is reused this long


@dataclass(frozen=True)
class WebConfig:
    """The read-only dashboard and its JSON API (/api/...), authenticated with the gRPC bearer tokens."""

    enabled: bool = False
    # host:port or unix:/PATH; empty = the metrics listener (metrics_listen), which then serves /metrics,
    # / and /api/. Bearer tokens cross it, so it must be a listener no ordinary local user could bind in
    # clusterd's absence: a unix socket (directory as the gRPC socket's), loopback on a port below the
    # kernel's ip_unprivileged_port_start (1024), or HTTPS ([tls]); plaintext elsewhere needs allow_insecure.
    listen: str = ""
    max_concurrent: int = 16  # requests served at once; more get 503
    log_tail_lines: int = 200  # lines of a job's log the page shows
    # The listener serving the dashboard (a metrics listener of its own keeps these defaults):
    # connections held at once (more wait in the kernel's queue), per client (a local user's uid, else
    # the address; more are refused), and the time the TLS handshake, a request's head and body must
    # arrive in (also the idle limit of a kept-alive connection).
    max_connections: int = 128
    max_connections_per_client: int = 16
    request_timeout_seconds: float = 10.0


@dataclass(frozen=True)
class StoreConfig:
    """Where job records live: empty url = SQLite under state_dir (one replica); a PostgreSQL URL
    (``postgresql:///clusterd?host=/run/postgresql``) lets several replicas share one database."""

    url: str = ""
    pool_min: int = 2  # connections each replica keeps open (PostgreSQL)
    pool_max: int = 20  # at most this many at once; record locks each hold one while held

    def __post_init__(self) -> None:
        if self.url and urlsplit(self.url).scheme not in ("postgresql", "postgres"):
            raise ConfigError(
                "store.url: expected empty (SQLite under state_dir) or a PostgreSQL URL "
                f"postgresql://[user@][host][:port]/dbname[?host=/socket/dir], got scheme {urlsplit(self.url).scheme!r}"
            )
        if self.pool_min < 1 or self.pool_max < self.pool_min:
            raise ConfigError(
                f"store.pool_min/pool_max: need 1 <= pool_min <= pool_max, got {self.pool_min}/{self.pool_max}"
            )


@dataclass(frozen=True)
class HAConfig:
    """Several replicas on one shared store (clusterd.ha): one leader supervises, all serve the API.

    The leader holds the store's "supervisor" lease and renews it every ``renew_seconds``; a leader
    that has not renewed for ``lease_seconds`` is replaced by the first follower to try (followers
    try as often as the leader renews). Failover therefore takes at most about
    ``lease_seconds + renew_seconds`` plus one queue poll. With one replica (SQLite) the lease
    is taken at start and kept; nothing else changes.
    """

    lease_seconds: float = 3.0
    renew_seconds: float = 1.0
    replica_name: str = ""  # shown in health, metrics and the lease row; empty = "<hostname>:<pid>"
    event_poll_seconds: float = 0.1  # how often a replica reads events other replicas logged
    event_retention_seconds: float = 3600.0  # how far back a watcher's resume_token can reach


@dataclass(frozen=True)
class Config:
    # unix:/ABSOLUTE/PATH (socket 0660 and its directory 0750, both group socket_group) or host:port,
    # which needs [tls] unless allow_insecure.
    listen: str = "unix:/run/clusterd/clusterd.sock"
    socket_group: str = "clusterctl"  # may connect to the unix socket; empty = clusterd's own user only
    state_dir: str = "/var/lib/clusterd"  # created 0700 (an existing one is tightened to 0700)
    tokens_file: str = "/etc/clusterd/tokens.toml"
    tokens_reload_seconds: float = 1.0  # how often the tokens file is checked for changes (off the event loop)
    poll_interval_seconds: float = 2.0
    shutdown_grace_seconds: float = 5.0
    # Plaintext where credentials cross a socket others can reach: gRPC over TCP without [tls], and
    # slurm.restd_url = http:// to a host other than loopback. For tests and trusted container networks.
    allow_insecure: bool = False
    audit_log: str = ""  # JSON lines of every mutating call; empty = <state_dir>/audit.log
    metrics_listen: str = ""  # host:port of the Prometheus /metrics endpoint; empty = off
    log_format: str = "json"  # json (one object per line, with request_id) | text
    log_level: str = "INFO"
    tls: TLSConfig = field(default_factory=TLSConfig)
    slurm: SlurmConfig = field(default_factory=SlurmConfig)
    limits: LimitsConfig = field(default_factory=LimitsConfig)
    restart: RestartDefaults = field(default_factory=RestartDefaults)
    supervisor: SupervisorConfig = field(default_factory=SupervisorConfig)
    liveness: LivenessConfig = field(default_factory=LivenessConfig)
    goodput: GoodputConfig = field(default_factory=GoodputConfig)
    views: ViewsConfig = field(default_factory=ViewsConfig)
    web: WebConfig = field(default_factory=WebConfig)
    ha: HAConfig = field(default_factory=HAConfig)
    store: StoreConfig = field(default_factory=StoreConfig)

    @property
    def db_path(self) -> Path:
        return Path(self.state_dir) / "clusterd.sqlite3"

    @property
    def audit_path(self) -> Path:
        return Path(self.audit_log) if self.audit_log else Path(self.state_dir) / "audit.log"


def _build(cls: type[Any], data: dict[str, Any], where: str) -> Any:
    """Construct dataclass ``cls`` from a TOML table, rejecting unknown keys by name."""
    known = {f.name: f for f in fields(cls)}
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        if key not in known:
            raise ConfigError(f"unknown config key '{where}{key}'")
        default = getattr(cls(), key)
        if is_dataclass(default):
            if not isinstance(value, dict):
                raise ConfigError(f"{where}{key} must be a table")
            kwargs[key] = _build(type(default), value, f"{where}{key}.")
        else:
            kwargs[key] = _coerce(value, default, f"{where}{key}", str(known[key].type))
    return cls(**kwargs)


def _coerce(value: Any, default: Any, name: str, kind: str = "") -> Any:
    """``value`` as the type of ``default``; ``kind`` is the field's annotation (what an empty tuple holds)."""
    if kind == "tuple[str, ...]":
        if isinstance(value, str):  # an environment variable: split as a shell would, never run by one
            try:
                return tuple(shlex.split(value))
            except ValueError as exc:
                raise ConfigError(f"{name}: {exc}") from exc
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return tuple(value)
        raise ConfigError(f"{name}: expected a list of strings, got {value!r}")
    if isinstance(default, bool):
        if isinstance(value, str):
            if value.lower() in ("1", "true", "yes", "on"):
                return True
            if value.lower() in ("0", "false", "no", "off"):
                return False
        if isinstance(value, bool):
            return value
    elif isinstance(default, int):
        try:
            return int(value)
        except (TypeError, ValueError):
            pass
    elif isinstance(default, float):
        try:
            return float(value)
        except (TypeError, ValueError):
            pass
    elif isinstance(default, str):
        if isinstance(value, str):
            return value
    elif isinstance(default, tuple):
        if isinstance(value, str):
            value = [v for v in value.split(",") if v.strip()]
        if isinstance(value, list):
            try:
                return tuple(int(v) for v in value)
            except (TypeError, ValueError):
                pass
    raise ConfigError(f"{name}: expected {type(default).__name__}, got {value!r}")


def _set_path(cfg: Any, dotted: str, raw: Any) -> Any:
    head, _, rest = dotted.partition(".")
    if not any(f.name == head for f in fields(cfg)):
        raise ConfigError(f"unknown config key {dotted!r}")
    current = getattr(cfg, head)
    if rest:
        if not is_dataclass(current):
            raise ConfigError(f"{head} is not a table")
        return replace(cfg, **{head: _set_path(current, rest, raw)})
    kind = next(str(f.type) for f in fields(cfg) if f.name == head)
    return replace(cfg, **{head: _coerce(raw, current, head, kind)})


def load_config(
    path: str | os.PathLike[str] | None = None,
    *,
    environ: dict[str, str] | None = None,
    overrides: dict[str, Any] | None = None,
) -> Config:
    """File, then ``CLUSTERD_<SECTION>__<KEY>`` variables (``CLUSTERD_LISTEN``), then ``overrides``."""
    cfg = Config()
    if path is not None:
        try:
            data = tomllib.loads(Path(path).read_text())
        except OSError as exc:
            raise ConfigError(f"cannot read config {path}: {exc.strerror}") from exc
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config {path} is not valid TOML: {exc}") from exc
        cfg = _build(Config, data, "")
    env = os.environ if environ is None else environ
    for name, value in sorted(env.items()):
        if name.startswith("CLUSTERD_") and name not in ("CLUSTERD_CONFIG",):
            dotted = name[len("CLUSTERD_") :].lower().replace("__", ".")
            cfg = _set_path(cfg, dotted, value)
    for dotted, value in (overrides or {}).items():
        if value is not None:
            cfg = _set_path(cfg, dotted, value)
    return cfg
