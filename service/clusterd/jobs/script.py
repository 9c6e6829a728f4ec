"""Batch scripts: read their ``#SBATCH`` header, add the service's environment, or generate one.

sbatch itself applies a script's ``#SBATCH`` lines; the service reads them too so that validation and
placement see the same request Slurm will. Command-line options override ``#SBATCH`` lines, as in
sbatch.
"""

from __future__ import annotations

import shlex

# Short options sbatch accepts in #SBATCH lines, mapped to their long names.
_SHORT = {
    "N": "nodes", "n": "ntasks", "c": "cpus-per-task", "t": "time", "p": "partition", "J": "job-name",
    "A": "account", "q": "qos", "o": "output", "e": "error", "D": "chdir", "w": "nodelist",
    "x": "exclude", "G": "gpus", "C": "constraint", "d": "dependency",
}  # fmt: skip

# Options that only root may choose, or that would undo what the service sets for the job.
FORBIDDEN_DIRECTIVES = frozenset({"uid", "gid", "export", "export-file", "get-user-env", "parsable", "wrap"})


def forbidden_directive(name: str) -> str | None:
    """The forbidden option ``name`` means, if any.

    sbatch (getopt_long) accepts any unambiguous prefix of a long option (``--get-user``, ``--wra``),
    so a name that abbreviates a forbidden option is refused too.
    """
    if not name:
        return None
    return next((f for f in sorted(FORBIDDEN_DIRECTIVES) if f == name or f.startswith(name)), None)


class ScriptError(ValueError):
    """The script's header cannot be read; the message names the line."""


def _header_lines(script: str) -> tuple[list[str], int]:
    """Lines of the leading comment block (sbatch stops at the first command), and its end index."""
    lines = script.split("\n")
    end = 0
    for i, line in enumerate(lines):
        stripped = line.strip()
        if i == 0 and stripped.startswith("#!"):
            end = i + 1
            continue
        if stripped == "" or stripped.startswith("#"):
            end = i + 1
            continue
        break
    return lines[:end], end


def parse_directives(script: str) -> dict[str, str]:
    """``{long_option: value}`` from the ``#SBATCH`` header ("" for flags). Later lines win."""
    header, _ = _header_lines(script)
    options: dict[str, str] = {}
    for lineno, line in enumerate(header, start=1):
        stripped = line.strip()
        if not stripped.startswith("#SBATCH"):
            continue
        body = stripped[len("#SBATCH") :]
        if body and not body[0].isspace():
            continue  # "#SBATCHX" is a comment to sbatch too
        body = body.split(" #", 1)[0]
        try:
            tokens = shlex.split(body)
        except ValueError as exc:
            raise ScriptError(f"line {lineno}: cannot parse #SBATCH line: {exc}") from exc
        i = 0
        while i < len(tokens):
            tok = tokens[i]
            if tok.startswith("--"):
                name, eq, value = tok[2:].partition("=")
                if not eq and i + 1 < len(tokens) and not tokens[i + 1].startswith("-"):
                    value = tokens[i + 1]
                    i += 1
            elif tok.startswith("-") and len(tok) >= 2:
                name = _SHORT.get(tok[1], tok[1])
                value = tok[2:].lstrip("=")
                if not value and i + 1 < len(tokens) and not tokens[i + 1].startswith("-"):
                    value = tokens[i + 1]
                    i += 1
            else:
                raise ScriptError(f"line {lineno}: unexpected token {tok!r} in #SBATCH line")
            options[name] = value
            i += 1
    return options


# Values only known when the job (re)starts: Slurm's restart count, and the newest committed
# checkpoint step, read from storage by the job's own clusterctl (-1 when none or unreadable).
_RUNTIME_ENV = [
    'export CLUSTERCTL_RESTART_COUNT="${SLURM_RESTART_COUNT:-0}"',
    'CLUSTERCTL_RESUME_STEP=-1',
    'if [ -n "${CLUSTERCTL_CHECKPOINT_URI:-}" ] && command -v clusterctl >/dev/null 2>&1; then',
    '    CLUSTERCTL_RESUME_STEP="$(clusterctl checkpoints latest "$CLUSTERCTL_CHECKPOINT_URI" 2>/dev/null || echo -1)"',
    'fi',
    "export CLUSTERCTL_RESUME_STEP",
]


def inject_environment(script: str, env: dict[str, str]) -> str:
    """Insert ``export NAME=value`` lines right after the ``#SBATCH`` header.

    Values travel inside the script (quoted), never in sbatch's own environment: sbatch runs as root
    and reads SLURM_*/SBATCH_*/LD_* variables itself.
    """
    lines = script.split("\n")  # only newlines: str.splitlines() would also split on \x0c, \u2028, ...
    _, end = _header_lines(script)
    exports = ["# --- environment added by clusterd ---"]
    exports += [f"export {name}={shlex.quote(value)}" for name, value in sorted(env.items())]
    exports += _RUNTIME_ENV
    exports.append("# --- end of clusterd environment ---")
    return "\n".join(lines[:end] + exports + lines[end:])


def command_script(command: list[str]) -> str:
    """A batch script that runs ``command`` once per task on every allocated node with srun."""
    quoted = " ".join(shlex.quote(arg) for arg in command)
    return f"#!/bin/bash\n# generated by clusterd for a command submission\nexec srun --kill-on-bad-exit=1 {quoted}\n"
