"""sbatch option values read with sbatch's own syntax (pure). Each reader raises ValueError with a
short reason fit for the user; nothing here knows about protos or requests."""

from __future__ import annotations

import re

_COUNT_RE = re.compile(r"[0-9]{1,40}\Z")
# Slurm's str_to_mbytes: a whole number, an optional K/M/G/T unit and B; "1.5G" is refused by sbatch.
_MEM_RE = re.compile(r"([0-9]{1,40})([KMGT]?)B?\Z", re.IGNORECASE)
_MEM_KB = {"K": 1, "": 1024, "M": 1024, "G": 1024**2, "T": 1024**3}
_TIME_RE = re.compile(
    r"(?:(?P<d>[0-9]+)-(?P<dh>[0-9]+)(?::(?P<dm>[0-9]+)(?::(?P<ds>[0-9]+))?)?"
    r"|(?P<h>[0-9]+):(?P<hm>[0-9]+):(?P<hs>[0-9]+)|(?P<m>[0-9]+)(?::(?P<ms>[0-9]+))?)\Z"
)
_GPU_RE = re.compile(r"(?:([A-Za-z0-9_.\-]{1,64}):)?([0-9]{1,40})\Z")
_TYPE_RE = re.compile(r"[A-Za-z0-9_.\-]{1,64}\Z")


def count(text: str) -> int:
    """A positive whole number (ASCII digits)."""
    if not _COUNT_RE.match(text) or int(text) <= 0:
        raise ValueError(f"{text[:40]!r} is not a positive whole number")
    return int(text)


def non_negative(text: str) -> int:
    """A whole number >= 0 (a leading '-' is refused: negative values are privileges in Slurm)."""
    if not _COUNT_RE.match(text):
        raise ValueError(f"{text[:40]!r} is not a non-negative whole number")
    return int(text)


def megabytes(text: str, *, zero_ok: bool = False) -> int:
    """``--mem=2G`` -> 2048: a whole number with an optional K, M, G or T unit (MB by default),
    kilobytes rounded up to whole megabytes, as sbatch. ``1.5G`` is refused, as sbatch refuses it.
    ``zero_ok``: ``--mem=0``, sbatch's "all the memory of each node"."""
    m = _MEM_RE.match(text.strip())
    if not m:
        raise ValueError(f"bad memory size {text[:40]!r}: use a whole number with an optional K, M, G or T unit")
    kb = int(m.group(1)) * _MEM_KB[m.group(2).upper()]
    mb = -(-kb // 1024)
    if mb == 0 and zero_ok:
        return 0
    if mb <= 0:
        raise ValueError(f"memory size {text[:40]!r} must be positive")
    return mb


def parse_time(text: str) -> int | None:
    """Slurm's time syntax (MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS) in seconds; None for
    UNLIMITED/INFINITE. Raises ValueError when malformed."""
    if text.upper() in ("UNLIMITED", "INFINITE", "-1"):
        return None
    m = _TIME_RE.match(text)
    if not m:
        raise ValueError(f"bad time {text[:40]!r}: use MM, MM:SS, HH:MM:SS, D-HH[:MM[:SS]] or UNLIMITED")
    g = {k: int(v) for k, v in m.groupdict().items() if v is not None}
    if "d" in g:
        return g["d"] * 86400 + g["dh"] * 3600 + g.get("dm", 0) * 60 + g.get("ds", 0)
    if "h" in g:
        return g["h"] * 3600 + g["hm"] * 60 + g["hs"]
    return g["m"] * 60 + g.get("ms", 0)


def time_limit(text: str) -> int | None:
    """``--time``: :func:`parse_time`, zero refused (None: UNLIMITED)."""
    try:
        seconds = parse_time(text)
    except ValueError as exc:
        raise ValueError(str(exc).replace("bad time", "bad time limit", 1)) from None
    if seconds == 0:
        raise ValueError("time limit must be greater than zero")
    return seconds


def finite_time(text: str) -> int:
    """``--time-min``: a finite, positive :func:`parse_time`."""
    seconds = parse_time(text)
    if not seconds:
        raise ValueError(f"{text[:40]!r} must be a finite time greater than zero")
    return seconds


def gpus(text: str) -> tuple[str, int]:
    """``[TYPE:]N`` (``--gpus``, ``--gpus-per-node``, ``--gpus-per-task``) -> (type, count)."""
    m = _GPU_RE.match(text)
    if not m:
        raise ValueError(f"cannot read GPU request {text[:40]!r}: use [TYPE:]COUNT")
    return m.group(1) or "", count(m.group(2))


def gres_gpus(text: str) -> tuple[str, int]:
    """``--gres=gpu[:TYPE][:N]`` -> (type, count): the GRES this cluster's nodes carry are GPUs."""
    kind, _, rest = text.partition(":")
    if kind not in ("gpu", "gres/gpu") or "," in text:
        raise ValueError(f"{text[:40]!r}: the GRES clusterd knows are GPUs: use --gres=gpu[:TYPE][:COUNT]")
    if not rest:
        return "", 1
    if ":" not in rest and not _COUNT_RE.match(rest):
        if not _TYPE_RE.match(rest):
            raise ValueError(f"bad GPU type in {text[:40]!r}")
        return rest, 1
    return gpus(rest)


def choice(text: str, choices: tuple[str, ...], what: str) -> str:
    """One of ``choices`` (case-insensitive, as Slurm's option parsers), in its canonical spelling."""
    for c in choices:
        if text.lower() == c.lower():
            return c
    raise ValueError(f"bad {what} {text[:40]!r}: use one of {', '.join(choices)}")


_GPU_BIND_RE = re.compile(
    r"(?:verbose,)?(?:closest|none|single:[0-9]{1,5}|per_task:[0-9]{1,5}|map_gpu:[0-9*x,]{1,512}"
    r"|mask_gpu:[0-9a-fA-Fx*,]{1,512})\Z"
)
_DIST_RE = re.compile(
    r"(?:\*|block|cyclic|arbitrary|plane=[0-9]{1,5})(?::(?:\*|block|cyclic|fcyclic)){0,2}(?:,(?:Pack|NoPack))?\Z",
    re.IGNORECASE,
)
_SCT_RE = re.compile(r"(\*|[0-9]{1,5})(?::(\*|[0-9]{1,5}))?(?::(\*|[0-9]{1,5}))?\Z")
_NAME_RE = re.compile(r"[A-Za-z0-9_.\-]{1,64}\Z")


def gpu_bind(text: str) -> str:
    """``--gpu-bind``: closest, none, single:N, per_task:N, map_gpu:LIST, mask_gpu:LIST (verbose, first)."""
    if not _GPU_BIND_RE.match(text):
        raise ValueError(
            f"bad --gpu-bind {text[:40]!r}: use closest, none, single:N, per_task:N, map_gpu:... or mask_gpu:..."
        )
    return text


def distribution(text: str) -> str:
    """``-m``: NODE[:SOCKET[:CORE]][,Pack|NoPack], each block, cyclic, fcyclic, arbitrary, plane=N or *."""
    if not _DIST_RE.match(text):
        raise ValueError(f"bad --distribution {text[:40]!r}: use e.g. block, cyclic:cyclic, plane=4, block:block,Pack")
    return text


def extra_node_info(text: str) -> tuple[int | None, int | None, int | None]:
    """``-B S[:C[:T]]`` -> sockets per node, cores per socket, threads per core (``*``: any)."""
    m = _SCT_RE.match(text)
    if not m:
        raise ValueError(f"bad -B {text[:40]!r}: use SOCKETS[:CORES[:THREADS]], each a number or *")
    parts = [None if g in (None, "*") else count(g) for g in m.groups()]
    return parts[0], parts[1], parts[2]


def comment(text: str) -> str:
    """``--comment``: free text for the user's own bookkeeping, one printable line of at most 1,000 characters."""
    if len(text) > 1000 or not text.isprintable():
        raise ValueError("a comment is one line of at most 1000 printable characters")
    return text


def name(text: str) -> str:
    """A Slurm name (wckey, partition, account, ...): 1-64 of [A-Za-z0-9_.-]."""
    if not _NAME_RE.match(text):
        raise ValueError(f"{text[:40]!r} must be 1-64 of [A-Za-z0-9_.-]")
    return text


_MEM_BIND_RE = re.compile(
    r"(?:(?:quiet|verbose|sort|nosort|prefer),)*(?:none|rank|local|sort|nosort|prefer|map_mem:[0-9*x,]{1,512}"
    r"|mask_mem:[0-9a-fA-Fx*,]{1,512})\Z"
)
_ACCTG_RE = re.compile(r"(?:[0-9]{1,9}|[a-z]{1,16}=[0-9]{1,9})(?:,[a-z]{1,16}=[0-9]{1,9})*\Z")
_LICENSE = r"[A-Za-z0-9_.\-@]{1,64}(?::[0-9]{1,9})?"
_LICENSES_RE = re.compile(rf"{_LICENSE}(?:[,|]{_LICENSE}){{0,63}}\Z")
_FEATURES_RE = re.compile(r"[A-Za-z0-9_.\-&|]{1,1024}\Z")


def mem_bind(text: str) -> str:
    """``--mem-bind``: [quiet|verbose,]none, rank, local, map_mem:LIST, mask_mem:LIST, sort, nosort, prefer."""
    if not _MEM_BIND_RE.match(text):
        raise ValueError(f"bad --mem-bind {text[:40]!r}: use e.g. local, rank, map_mem:0,1 or verbose,local")
    return text


def acctg_freq(text: str) -> str:
    """``--acctg-freq``: SECONDS or DATATYPE=SECONDS[,...] (task, energy, network, filesystem)."""
    if not _ACCTG_RE.match(text):
        raise ValueError(f"bad --acctg-freq {text[:40]!r}: use SECONDS or e.g. task=30,energy=0")
    return text


def licenses(text: str) -> str:
    """``-L``: NAME[:COUNT] separated by ``,`` (all) or ``|`` (any)."""
    if not _LICENSES_RE.match(text):
        raise ValueError(f"bad --licenses {text[:40]!r}: use NAME[:COUNT][,NAME[:COUNT]...]")
    return text


def features(text: str) -> str:
    """A node feature expression (``--batch``): names joined by ``&`` and ``|``."""
    if not _FEATURES_RE.match(text):
        raise ValueError(f"bad feature list {text[:40]!r}: use names joined by & or |")
    return text


def no_kill(text: str | None) -> bool:
    """``--no-kill[=off]``: True for the flag, False for ``off``."""
    if text is None or text == "":
        return True
    if text.lower() == "off":
        return False
    raise ValueError(f"bad --no-kill {text[:40]!r}: give no value, or off")


_ARRAY_RE = re.compile(r"([0-9]{1,7})(?:-([0-9]{1,7})(?::([0-9]{1,7}))?)?\Z")
MAX_ARRAY_TASKS = 10000  # tasks one --array may ask for through clusterd
_MAX_ARRAY_INDEX = 4_000_000


def node_range(text: str) -> tuple[int, int | None]:
    """``-N N`` or ``-N MIN-MAX`` -> (MIN, MAX or None)."""
    low, dash, high = text.partition("-")
    minimum = count(low)
    if not dash:
        return minimum, None
    maximum = count(high)
    if maximum < minimum:
        raise ValueError(f"{text!r}: the maximum is below the minimum")
    return minimum, maximum


def array_indices(text: str, limit: int = MAX_ARRAY_TASKS) -> tuple[tuple[int, ...], int | None]:
    """``--array``: ``0-9``, ``1,3,5``, ``0-15:4``, optionally ``%N`` -> (sorted indices, N or None);
    at most ``limit`` tasks, indices below 4,000,000 (counted before anything is expanded)."""
    body, pct, throttle = text.partition("%")
    indices: set[int] = set()
    for part in body.split(","):
        m = _ARRAY_RE.match(part)
        if not m:
            raise ValueError(f"cannot read array index {part[:40]!r}: use N, N-M or N-M:STEP")
        start = int(m.group(1))
        stop = int(m.group(2)) if m.group(2) is not None else start
        step = int(m.group(3)) if m.group(3) is not None else 1
        if stop < start or step <= 0 or stop >= _MAX_ARRAY_INDEX:
            raise ValueError(f"bad array range {part!r}")
        if (stop - start) // step + 1 + len(indices) > limit:
            raise ValueError(f"more than {limit} array tasks")
        indices.update(range(start, stop + 1, step))
    max_running = count(throttle) if pct else None
    if max_running is not None and max_running > limit:
        raise ValueError(f"%{max_running}: at most {limit} tasks can run at once")
    return tuple(sorted(indices)), max_running


def node_memory(text: str) -> int:
    """``--mem``: :func:`megabytes`, where 0 asks for all the memory of each node."""
    return megabytes(text, zero_ok=True)
