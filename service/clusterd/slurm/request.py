"""The job request that crosses the Slurm seam: typed, validated once, rendered by each backend.

Validation (:mod:`clusterd.jobs.validate`) makes one :class:`JobRequest` from the API's JobSpec
and the script's directives; every backend renders it its own way (sbatch argv, slurmrestd JSON
per API version, a pyslurm job description). No option strings cross the seam: a field the request
does not have cannot reach Slurm, which is what makes the directive allowlist hold by construction.
Each backend keeps a renderer per field, and a test pins that every field has one.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

from clusterctl.sbatch.values import parse_time
from clusterd.slurm.arrays import compress


def parse_time_limit(text: str) -> int | None:
    """Slurm time syntax to seconds; None for UNLIMITED/INFINITE. Raises ValueError when malformed."""
    return parse_time(text)


def slurm_time(seconds: int) -> str:
    """Seconds as a Slurm time string: ``M:SS``, ``H:MM:SS`` or ``D-HH:MM:SS``."""
    seconds = max(int(seconds), 0)
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}-{hours:02d}:{minutes:02d}:{secs:02d}"
    if hours:
        return f"{hours}:{minutes:02d}:{secs:02d}"
    return f"{minutes}:{secs:02d}"


class ExportMode(enum.Enum):
    """sbatch ``--export``: ALL (the submitter's environment, here the request's), NONE, or a list."""

    ALL = "ALL"
    NONE = "NONE"
    LIST = "LIST"  # only the named variables


@dataclass(frozen=True)
class Export:
    """What the job's environment starts from; ``variables`` are the values the job sees."""

    mode: ExportMode = ExportMode.ALL
    variables: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ArraySpec:
    """``--array``: the index expression as sbatch takes it, with its task count (for quotas)."""

    indices: tuple[int, ...]
    max_running: int | None = None  # the ``%N`` suffix

    def render(self) -> str:
        """Ranges re-compressed (``0-3,7``) plus ``%N``: Slurm's own syntax."""
        text = compress(self.indices)
        return f"{text}%{self.max_running}" if self.max_running else text


@dataclass(frozen=True)
class Switches:
    """``--switches=COUNT@WAIT``: at most COUNT leaf switches, waiting up to WAIT seconds for it."""

    count: int
    wait_seconds: int | None = None

    def render(self) -> str:
        return f"{self.count}@{slurm_time(self.wait_seconds)}" if self.wait_seconds is not None else str(self.count)


@dataclass(frozen=True)
class Signal:
    """``--signal=[R|B:]SIG@SECONDS``: SIG this long before the time limit (B: to the batch shell only;
    R: before the end of the job's reservation instead)."""

    name: str  # without the SIG prefix: "USR1"
    seconds: int
    batch_only: bool = True
    reservation_end: bool = False

    def render(self) -> str:
        flags = ("R" if self.reservation_end else "") + ("B" if self.batch_only else "")
        return f"{flags + ':' if flags else ''}{self.name}@{self.seconds}"


class Sharing(enum.Enum):
    """``--exclusive[=user|mcs]`` / ``--oversubscribe``: how the job shares its nodes (last one wins)."""

    EXCLUSIVE = "exclusive"  # no other job on the nodes
    USER = "user"  # only this user's jobs
    MCS = "mcs"  # only jobs of the same MCS label
    OVERSUBSCRIBE = "oversubscribe"  # resources may be shared with other jobs


@dataclass(frozen=True)
class JobRequest:
    """One batch job as Slurm must run it; every field has sbatch's meaning.

    ``None`` (or empty) means "not asked": Slurm's own default applies, as when sbatch is not given
    the option. ``script`` is the body handed to Slurm with its directive lines neutralised, so
    nothing but these fields reaches the scheduler.
    """

    script: str
    name: str
    user: str  # the Unix user the job runs as (the caller)
    comment: str = ""
    partition: str = ""
    account: str = ""
    qos: str = ""
    reservation: str = ""
    nodes: int | None = None  # -N MIN
    max_nodes: int | None = None  # -N MIN-MAX
    ntasks: int | None = None
    tasks_per_node: int | None = None
    cpus_per_task: int | None = None
    gpus: int | None = None  # --gpus: per job
    gpus_per_node: int | None = None  # --gres=gpu[:TYPE]:N
    gpu_type: str = ""
    memory_mb_per_node: int | None = None
    memory_mb_per_cpu: int | None = None
    time_limit_seconds: int | None = None  # None: the partition's default
    time_unlimited: bool = False
    constraint: str = ""
    nodelist: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    switches: Switches | None = None
    working_directory: str = ""  # -D (absolute, checked); "" = the submit directory
    submit_directory: str = ""  # SLURM_SUBMIT_DIR
    stdout: str = ""  # -o, absolute or relative to the working directory; "" = Slurm's default
    stderr: str = ""
    stdin: str = ""  # -i: a file the batch script reads on stdin (slurmd opens it, as the user); "" = /dev/null
    array: ArraySpec | None = None
    dependency: str = ""
    begin: str = ""
    hold: bool = False
    sharing: Sharing | None = None
    mail_type: tuple[str, ...] = ()
    mail_user: str = ""
    nice: int = 0
    requeue: bool = True
    open_append: bool = True  # --open-mode=append: a requeued job keeps its earlier output
    signal: Signal | None = None
    export: Export = field(default_factory=Export)
    gpus_per_task: int | None = None  # --gpus-per-task (typed like the other GPU options)
    cpus_per_gpu: int | None = None
    memory_mb_per_gpu: int | None = None
    tasks_per_gpu: int | None = None  # --ntasks-per-gpu
    tasks_per_core: int | None = None  # --ntasks-per-core
    gpu_bind: str = ""
    gres_flags: str = ""  # enforce-binding | disable-binding
    hint: str = ""
    distribution: str = ""  # -m
    sockets_per_node: int | None = None  # -B S:C:T and --sockets-per-node ...
    cores_per_socket: int | None = None
    threads_per_core: int | None = None
    min_cpus_per_node: int | None = None  # --mincpus
    contiguous: bool = False
    spread_job: bool = False
    kill_on_invalid_dep: bool | None = None  # --kill-on-invalid-dep=yes|no
    deadline: str = ""  # sbatch's time syntax, as --begin
    time_min_seconds: int | None = None  # --time-min
    wckey: str = ""
    tmp_mb: int | None = None  # --tmp: scratch disk per node
    tasks_per_socket: int | None = None  # --ntasks-per-socket
    gpus_per_socket: int | None = None  # --gpus-per-socket (typed like the other GPU options)
    delay_boot_seconds: int | None = None  # --delay-boot
    overcommit: bool = False
    no_kill: bool = False  # --no-kill: keep running when an allocated node fails
    use_min_nodes: bool = False
    wait_all_nodes: bool | None = None  # --wait-all-nodes=0|1
    mem_bind: str = ""
    acctg_freq: str = ""
    licenses: str = ""
    batch_features: str = ""  # --batch: features the batch host must have (a subset of --constraint)

    @property
    def task_count(self) -> int:
        """Jobs this request becomes in Slurm: one per array task (what quotas count)."""
        return len(self.array.indices) if self.array else 1
