# shellcheck shell=bash
# The Python that jobs use. Jobs run as alice/bob inside the node namespaces, so they need an
# interpreter and a copy of clusterctl they can read: Debian's /usr/bin/python3 in a venv under
# $STATE, with this repository installed (not editable: the checkout may live where job users
# cannot read, e.g. under /root), plus a copy of examples/.

JOBENV="$STATE/jobenv"
JOB_EXAMPLES="$STATE/examples"
REPO_ROOT="$(cd "$STACK_HOME/../.." && pwd)"

jobenv_up() {
    local stamp want
    if ! /usr/bin/python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
        log "installing python3-venv for the job environment"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
    fi
    want="$(cd "$REPO_ROOT" && find pyproject.toml client service -name '*.py' -o -name 'pyproject.toml' \
        | sort | xargs cat | sha256sum | cut -c1-16)"
    stamp="$JOBENV/.clusterctl-source"
    if [[ ! -x "$JOBENV/bin/python" ]]; then
        log "creating the job Python environment in $JOBENV"
        /usr/bin/python3 -m venv "$JOBENV"
    fi
    if [[ "$(cat "$stamp" 2>/dev/null)" != "$want" ]]; then
        log "installing clusterctl into the job environment (pip)"
        "$JOBENV/bin/python" -m pip install -q --disable-pip-version-check "$REPO_ROOT" >"$LOGS/jobenv-pip.log" 2>&1 \
            || { show_tail "$LOGS/jobenv-pip.log"; die "pip install into $JOBENV failed"; }
        echo "$want" >"$stamp"
    fi
    jobenv_torch
    mkdir -p "$JOB_EXAMPLES"
    cp "$REPO_ROOT"/examples/*.py "$JOB_EXAMPLES/"
    chmod -R a+rX "$JOBENV" "$JOB_EXAMPLES"
}

# torch for the examples that train with it (examples/train_torch.py): the machine's CPU wheel when
# one lies on its local wheel shelf (never a multi-GB CUDA download from PyPI), once. Without it the
# job environment has no torch and the tests that run torch jobs on the stack skip.
jobenv_torch() {
    local wheel
    wheel="$(ls /opt/wheels/torch-*+cpu-*.whl 2>/dev/null | head -n 1 || true)"
    [[ -n "$wheel" ]] || return 0
    "$JOBENV/bin/python" -c 'import torch' >/dev/null 2>&1 && return 0
    log "installing torch (CPU wheel) into the job environment (pip, once)"
    "$JOBENV/bin/python" -m pip install -q --disable-pip-version-check "$wheel" >>"$LOGS/jobenv-pip.log" 2>&1 \
        || warn "torch did not install into $JOBENV (log: $LOGS/jobenv-pip.log); torch jobs cannot run on the stack"
}

# PATH for jobs (clusterd's slurm.job_path): the job environment first, so `python3` and
# `clusterctl` in a job are the ones that can import clusterctl.
job_path() { echo "$JOBENV/bin:/usr/local/bin:/usr/bin:/bin"; }
