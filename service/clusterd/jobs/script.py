"""Batch scripts: add the service's environment after the header, or generate one for a command.

The header itself is read (and neutralised) by :mod:`clusterd.jobs.directives`.
"""

from __future__ import annotations

import secrets
import shlex

from clusterctl.sbatch.environment import exported_function
from clusterd.jobs.directives import header_end

RESUME_STEP = "CLUSTERCTL_RESUME_STEP"
CHECKPOINT_TIER = "CLUSTERCTL_CHECKPOINT_TIER"

# Values only known when the job (re)starts. Slurm's restart count costs nothing.
_RESTART_ENV = ['export CLUSTERCTL_RESTART_COUNT="${SLURM_RESTART_COUNT:-0}"']
# The newest committed checkpoint step, read from storage by the job's own clusterctl (-1 when none
# or unreadable): a fresh Python process and a LIST, 0.5-3 s on the path from the batch script
# starting to the first training step of every (re)start. So it is computed only for scripts that
# mention it; programs learn the step from CheckpointManager.restore() / latest_step() themselves.
_RESUME_ENV = [
    f"{RESUME_STEP}=-1",
    'if [ -n "${CLUSTERCTL_CHECKPOINT_URI:-}" ] && command -v clusterctl >/dev/null 2>&1; then '
    f'{RESUME_STEP}="$(clusterctl checkpoints latest "$CLUSTERCTL_CHECKPOINT_URI" 2>/dev/null || echo -1)"; fi',
    f"export {RESUME_STEP}",
]

# --checkpoint-tier memory: one tier per node, each a background step of its own (of the job's user,
# as all of the job is), up before the script's own lines run, stopped when the batch shell exits.
# One step per node: a node's death ends the step on it, and Slurm ends a step that loses a node on
# all of them, so one step over the allocation would take the survivors' memory with the dead node.
# ``wait`` finds the tiers (at ports derived from the secret), gives each its peers and prints them for
# the ranks. The Python is the one of the job's clusterctl; the secret travels in the environment,
# never in argv.
_TIER_PY = "$_ct_py"
_TIER_START = [
    '_ct_py="$(sed -n \'1s/^#!//p\' "$(command -v clusterctl)" 2>/dev/null)"; [ -n "$_ct_py" ] || _ct_py=python3',
    f'_ct_tier=; for _ct_n in $("{_TIER_PY}" -m clusterctl.tier.allocation nodes); do '
    'srun --overlap --nodes=1 --ntasks=1 --ntasks-per-node=1 --nodelist="$_ct_n" '
    f'--job-name=clusterctl-tier "{_TIER_PY}" -m clusterctl.tier.allocation serve </dev/null >/dev/null & '
    '_ct_tier="$_ct_tier $!"; done',
    f'export CLUSTERCTL_TIER_PEERS="$("{_TIER_PY}" -m clusterctl.tier.allocation wait)"',
    # USR1: srun passes it to the tier, which exits 0 (on TERM srun would SIGKILL it, noisily)
    "trap 'kill -USR1 $_ct_tier 2>/dev/null; wait $_ct_tier 2>/dev/null' EXIT",
]


def tier_environment(record_id: int) -> dict[str, str]:
    """The job's tier variables: its tier namespace and a fresh random secret (hex, 32 bytes).

    The secret exists only in the job's batch script and environment, as the heartbeat token does:
    it is never stored in the record, shown by GetJob/ListJobs or logged."""
    return {
        CHECKPOINT_TIER: "memory",
        "CLUSTERCTL_TIER_JOB": f"record-{record_id}",
        "CLUSTERCTL_TIER_SECRET": secrets.token_hex(32),
    }


RANK_NODES = "CLUSTERCTL_RANK_NODES"  # --spare-nodes: the nodes the ranks run on (the rest are spares)
# clusterd's AdminComment on a job relaunched in place: "<this>R.G@NODES", relaunch G of run R (Slurm's
# restart count) runs on NODES. Only an administrator can set it; the job only reads it.
RELAUNCH_NOTE = "clusterctl-relaunch="
_NOTE = (
    '_clusterctl_gen() { sed -n "s/.*AdminComment=' + RELAUNCH_NOTE + "${SLURM_RESTART_COUNT:-0}"
    '\\\\.\\\\([0-9]*\\\\)@\\\\([^ ]*\\\\).*/\\\\1 \\\\2/p"; }; '
)
# --spare-nodes: the script sees the ranks' node count in SLURM_NNODES/SLURM_JOB_NUM_NODES (the
# spares are not its to use), and ``srun`` is this function. Each step runs on the job's rank
# nodes (after a relaunch, the ones clusterd's note names). When a step fails it waits up to
# CLUSTERCTL_RELAUNCH_WAIT s for clusterd to decide a relaunch in place (a higher G) and starts the
# step again there, with the allocation as it is now in SLURM_JOB_NODELIST;
# otherwise it returns srun's status (clusterd requeues the job, or the script goes on). SIGUSR1 and
# SIGTERM sent to the batch shell reach srun, as under ``exec srun``; a step stopped by them, or
# that exited 85/86 (requeue me / do not), returns at once.
RELAUNCH_SRUN = (
    'export SLURM_NNODES="$CLUSTERCTL_RANK_NODES" SLURM_JOB_NUM_NODES="$CLUSTERCTL_RANK_NODES"; '
    # sbatch derived the task count of --ntasks-per-node from N + spares: the ranks' nodes only count
    '[[ "${SLURM_NTASKS_PER_NODE:-}" =~ ^[0-9]+$ ]] && '
    "export SLURM_NTASKS=$((CLUSTERCTL_RANK_NODES * SLURM_NTASKS_PER_NODE)) "
    "SLURM_NPROCS=$((CLUSTERCTL_RANK_NODES * SLURM_NTASKS_PER_NODE)); "
    '_clusterctl_job() { scontrol show job -o "$SLURM_JOB_ID" 2>/dev/null; }; '
    + _NOTE
    + 'srun() { local info g h n rc p t s; g=0; n=; info="$(_clusterctl_job)"; '
    'read -r g n < <(_clusterctl_gen <<<"$info"); g="${g:-0}"; '
    'while :; do export CLUSTERCTL_RELAUNCH="$g"; '
    'command srun --nodes="$CLUSTERCTL_RANK_NODES" ${n:+--nodelist="$n"} "$@" & p=$!; '
    "s=; trap 'kill -USR1 '$p' 2>/dev/null; s=1' USR1; trap 'kill -TERM '$p' 2>/dev/null; s=1' TERM; "
    "wait $p; rc=$?; while [ $rc -gt 128 ] && kill -0 $p 2>/dev/null; do wait $p; rc=$?; done; trap - USR1 TERM; "
    '[ $rc -eq 0 ] && return 0; [ -n "$s" ] || [ $rc -eq 85 ] || [ $rc -eq 86 ] && return $rc; t=0; h=0; '
    'while [ $t -lt $((${CLUSTERCTL_RELAUNCH_WAIT:-15} * 10)) ]; do info="$(_clusterctl_job)"; h=0; '
    'read -r h n < <(_clusterctl_gen <<<"$info"); [ "${h:-0}" -gt "$g" ] && break; sleep 0.1; t=$((t + 1)); done; '
    '[ "${h:-0}" -gt "$g" ] || return $rc; g=$h; '
    'export SLURM_JOB_NODELIST="$(sed -n \'s/.* NodeList=\\([^ ]*\\).*/\\1/p\' <<<"$info")"; '
    'export SLURM_NODELIST="$SLURM_JOB_NODELIST"; '
    'echo "clusterctl: relaunch $g in place on $n" >&2; done; }; export -f srun _clusterctl_job _clusterctl_gen'
)


def inject_environment(script: str, env: dict[str, str]) -> str:
    """Insert ONE line of ``export NAME=value`` commands right after the directive header.

    An exported bash function (``BASH_FUNC_f%%``, as ``export -f f`` leaves it) is defined again and
    exported when the script runs under bash, as bash itself does with it under sbatch; another
    interpreter has no use for it.

    Values travel inside the script (quoted), never in sbatch's own environment, where sbatch
    would read SLURM_*/SBATCH_* variables as options; one line keeps the body's line numbers
    one off at most, so shell errors still point near the user's own lines. CLUSTERCTL_RESUME_STEP
    is looked up only when ``script`` mentions it (a generated command script: when its argv does).
    """
    lines = script.split("\n")  # only newlines: str.splitlines() would also split on \x0c, \u2028, ...
    end = header_end(lines)
    exports = []
    bash = "bash" in lines[0]
    for name, value in sorted(env.items()):
        function = exported_function(name, value)
        if function is None:
            exports.append(f"export {name}={shlex.quote(value)}")
        elif bash:  # as bash does with BASH_FUNC_f%% at start: define f again, exported to the steps
            exports.append(f'eval "{function} "{_ansi_c(value)}; export -f {function}')
    runtime = [*_RESTART_ENV, *(_RESUME_ENV if RESUME_STEP in script else [])]
    if env.get(CHECKPOINT_TIER) == "memory":
        runtime += _TIER_START
    if bash and RANK_NODES in env:
        runtime.append(RELAUNCH_SRUN)
    line = "; ".join([*exports, *runtime]) + "  # environment added by clusterd"
    return "\n".join([*lines[:end], line, *lines[end:]])


def _ansi_c(text: str) -> str:
    """``text`` as one bash ``$'...'`` word on one line (newlines and control characters escaped)."""
    out = []
    for ch in text:
        if ch in "\\'":
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ord(ch) < 32 or ord(ch) == 127:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return "$'" + "".join(out) + "'"


def command_script(command: list[str], *, relaunched: bool = False) -> str:
    """A batch script that runs ``command`` once per task on every allocated node with srun.

    ``relaunched`` (--spare-nodes): srun is the function :data:`RELAUNCH_SRUN` defines, which
    ``exec`` would bypass.
    """
    quoted = " ".join(shlex.quote(arg) for arg in command)
    run = "srun" if relaunched else "exec srun"
    return f"#!/bin/bash\n# generated by clusterd for a command submission\n{run} --kill-on-bad-exit=1 {quoted}\n"


def job_environment(variables: dict[str, str], *, record_id: int, checkpoint_uri: str) -> dict[str, str]:
    """What the job sees: the exported variables plus the CLUSTERCTL_* contract."""
    env = dict(variables)
    env["CLUSTERCTL_RECORD_ID"] = str(record_id)
    if checkpoint_uri:
        env["CLUSTERCTL_CHECKPOINT_URI"] = checkpoint_uri
    return env
