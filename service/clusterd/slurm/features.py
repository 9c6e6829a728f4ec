"""What the running Slurm release offers beyond 22.05, detected once at start and named by ``clusterd check``.

Verified against real daemons (deploy/local/stack.sh up --slurm 22.05|24.11|26.05):

* REST: each release serves its newest data_parser version and the ones before it (22.05: v0.0.38;
  24.11: v0.0.40-42; 26.05: v0.0.42-45). The slurmrestd backend speaks the newest both sides know.
* ``squeue``/``sinfo --json`` filters: 22.05 ignores them, newer releases honour them, including
  squeue's default state filter, so the poll asks ``--states=all`` (else finished jobs vanish).
* Node records: newer ``sinfo --json`` groups nodes and names no addresses; the commands backend
  reads ``scontrol show nodes --json`` there (address and slurmd port, for the liveness probe).
* ``SchedulerParameters=requeue_delay=N`` (25.11+): a requeued job waits N seconds instead of
  ``cred_expire`` (120 s). clusterd releases requeued jobs itself (``StartTime=now``) on every
  release, so this changes nothing while clusterd runs; it shortens recovery while clusterd is down.
* ``SlurmctldParameters=enable_expedited_requeue`` with ``sbatch --requeue=expedite`` (25.11+): not
  requested. On 26.05 a job that exits non-zero is then held (``REQUEUE_HOLD``) instead of failing,
  which would override the restart policy's exit-code rules. Nor is it faster here: on the 26.05
  test cluster (SlurmdTimeout=30) a killed node's job ran again after 60 s with it and 67 s with a
  plain ``--requeue`` (Slurm alone), against 41-47 s with clusterd releasing it after Slurm's
  detection and 9-15 s with clusterd's heartbeat detection.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from clusterd.config import SlurmConfig
from clusterd.errors import SlurmError
from clusterd.slurm.base import SlurmBackend
from clusterd.slurm.runner import CommandRunner
from clusterd.slurm.version import SlurmVersion, SlurmVersionError

_CONFIG_LINE_RE = re.compile(r"^(\S+)\s*=\s?(.*)$")
_REQUEUE_DELAY_FROM = (25, 11)
_REAL_BACKENDS = frozenset({"commands", "slurmrestd", "pyslurm"})


@dataclass(frozen=True)
class SlurmFeatures:
    """The release and the optional behaviours clusterd looked for; see the module docstring."""

    version: str
    requeue_delay_seconds: int | None = None  # None: Slurm's default (AuthInfo cred_expire, 120 s)
    expedited_requeue: bool = False  # the cluster allows sbatch --requeue=expedite
    rest_offered: tuple[str, ...] = ()  # API versions slurmrestd serves (slurmrestd backend only)
    rest_used: str = ""  # the one clusterd speaks
    private_data: frozenset[str] = frozenset()  # slurm.conf's PrivateData (e.g. "jobs": squeue shows one's own)

    @property
    def release(self) -> SlurmVersion | None:
        try:
            return SlurmVersion.parse(self.version)
        except SlurmVersionError:
            return None

    @property
    def json_filters(self) -> bool:
        """Whether squeue/sinfo --json honour their filters (22.05 prints everything)."""
        release = self.release
        return release is not None and release.release > (22, 5)

    def describe(self) -> list[str]:
        """One clause per feature: what the release offers and what clusterd does with it."""
        out = []
        if self.rest_used:
            offered = ", ".join(self.rest_offered) or "?"
            out.append(f"REST {self.rest_used} used (slurmrestd serves {offered})")
        if self.json_filters:
            out.append("squeue/sinfo --json honour filters: the poll asks --states=all")
            out.append(
                "nodes (commands backend) from scontrol show nodes --json: newer sinfo --json leaves out "
                "the node addresses the liveness probe needs"
            )
        else:
            out.append("squeue/sinfo --json ignore filters: the poll reads the whole queue and filters here")
        if self.requeue_delay_seconds is not None:
            out.append(
                f"requeue_delay={self.requeue_delay_seconds}s: requeued jobs wait that long, not 120 s "
                "(clusterd releases them at once either way)"
            )
        else:
            out.append("requeued jobs wait cred_expire (120 s) unless released: clusterd releases them (StartTime=now)")
        if "jobs" in self.private_data:
            out.append("PrivateData=jobs: `list --all` shows each user their own jobs, as squeue does")
        if self.expedited_requeue:
            out.append(
                "expedited requeue enabled on the cluster, not requested (a failing job would be held in "
                "REQUEUE_HOLD instead of failing; the restart policy decides)"
            )
        return out


def parse_show_config(text: str) -> dict[str, str]:
    """``scontrol show config`` -> {key: value}; ``(null)`` becomes ""."""
    out = {}
    for line in text.splitlines():
        m = _CONFIG_LINE_RE.match(line.strip())
        if m:
            value = m.group(2).strip()
            out[m.group(1)] = "" if value == "(null)" else value
    return out


def option(params: str, name: str) -> str | None:
    """``name``'s value in a comma list such as SchedulerParameters (``"name"`` alone -> "")."""
    for item in params.split(","):
        key, _, value = item.strip().partition("=")
        if key == name:
            return value
    return None


def from_config(version: str, config: dict[str, str]) -> SlurmFeatures:
    """The features a release's configuration turns on (options an older release would ignore are ignored)."""
    release = SlurmFeatures(version).release
    delay: int | None = None
    expedite = False
    if release is not None and release.release >= _REQUEUE_DELAY_FROM:
        raw = option(config.get("SchedulerParameters", ""), "requeue_delay")
        delay = int(raw) if raw is not None and raw.isdigit() else None
        expedite = option(config.get("SlurmctldParameters", ""), "enable_expedited_requeue") is not None
    private = frozenset(p.strip().lower() for p in config.get("PrivateData", "").split(",") if p.strip())
    return SlurmFeatures(version, delay, expedite, private_data=private - {"none"})


async def detect(config: SlurmConfig, backend: SlurmBackend) -> SlurmFeatures:
    """Ask the release (``version``, ``scontrol show config``, slurmrestd's API list) once.

    Raises SlurmError when Slurm cannot be reached; an unreadable configuration only leaves the
    optional features off.
    """
    version = await backend.version()
    settings: dict[str, str] = {}
    if asks_the_cluster(backend):  # a test double has no cluster to ask
        runner = CommandRunner(
            bin_dir=config.bin_dir, slurm_conf=config.slurm_conf, timeout=config.command_timeout_seconds
        )
        try:
            result = await runner.run(["scontrol", "show", "config"], check=False)
            settings = parse_show_config(result.stdout) if result.returncode == 0 else {}
        except SlurmError:
            pass
    features = from_config(version, settings)
    if asks_the_cluster(backend) and not settings:  # unread: as private as slurm.conf could make it
        features = replace(features, private_data=frozenset({"jobs"}))
    offered_versions = getattr(backend, "offered_versions", None)
    api_version = getattr(backend, "api_version", None)
    if offered_versions is not None and api_version is not None:
        offered = tuple(sorted(await offered_versions()))
        return replace(features, rest_offered=offered, rest_used=await api_version())
    return features


def asks_the_cluster(backend: SlurmBackend) -> bool:
    """Whether :func:`detect` reads a real cluster's configuration through ``backend`` (not a test double)."""
    return getattr(backend, "name", "") in _REAL_BACKENDS
