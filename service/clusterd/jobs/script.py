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

# --checkpoint-tier memory: one tier per node (a background step of the job's user, as all of the
# job is), up before the script's own lines run, stopped when the batch shell exits. The Python is
# the one of the job's clusterctl; the secret travels in the environment, never in argv.
_TIER_PY = "$_ct_py"
_TIER_START = [
    '_ct_py="$(sed -n \'1s/^#!//p\' "$(command -v clusterctl)" 2>/dev/null)"; [ -n "$_ct_py" ] || _ct_py=python3',
    f'export CLUSTERCTL_TIER_PEERS="$("{_TIER_PY}" -m clusterctl.tier.allocation peers)"',
    'srun --overlap --ntasks-per-node=1 --nodes="$SLURM_JOB_NUM_NODES" --ntasks="$SLURM_JOB_NUM_NODES" '
    f'--job-name=clusterctl-tier "{_TIER_PY}" -m clusterctl.tier.allocation serve </dev/null >/dev/null & _ct_tier=$!',
    f'"{_TIER_PY}" -m clusterctl.tier.allocation wait',
    # USR1: srun passes it to the tiers, which exit 0 (on TERM srun would SIGKILL them, noisily)
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


def command_script(command: list[str]) -> str:
    """A batch script that runs ``command`` once per task on every allocated node with srun."""
    quoted = " ".join(shlex.quote(arg) for arg in command)
    return f"#!/bin/bash\n# generated by clusterd for a command submission\nexec srun --kill-on-bad-exit=1 {quoted}\n"


def job_environment(variables: dict[str, str], *, record_id: int, checkpoint_uri: str) -> dict[str, str]:
    """What the job sees: the exported variables plus the CLUSTERCTL_* contract."""
    env = dict(variables)
    env["CLUSTERCTL_RECORD_ID"] = str(record_id)
    if checkpoint_uri:
        env["CLUSTERCTL_CHECKPOINT_URI"] = checkpoint_uri
    return env
