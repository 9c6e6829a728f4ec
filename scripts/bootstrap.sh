#!/usr/bin/env bash
# Install what the project needs to run and test: a virtualenv in .venv with clusterctl, clusterd
# and the dev tools (pip, from PyPI). Idempotent; prints the venv's path. Debian packages (Slurm,
# munge, python3-venv) are installed by deploy/local/stack.sh, which needs them.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if ! "$PY" -c 'import venv, ensurepip' >/dev/null 2>&1; then
    echo "bootstrap: installing python3-venv (apt)" >&2
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
fi
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
stamp=.venv/.clusterctl-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    if ! { .venv/bin/python -m pip install -q --upgrade pip && .venv/bin/python -m pip install -q -e '.[dev]'; } \
            >.venv/pip.log 2>&1; then
        tail -n 30 .venv/pip.log >&2
        echo "bootstrap: pip install failed (full log: .venv/pip.log)" >&2
        exit 1
    fi
    # torch is optional for users; the tests exercise it (bfloat16, tensors, torch.distributed) when a
    # CPU wheel is on this machine kind's local wheel shelf, never pulling a multi-GB CUDA build.
    cpu_torch=$(ls /opt/wheels/torch-*+cpu-*.whl 2>/dev/null | head -n 1 || true)
    if [ -n "$cpu_torch" ] && ! .venv/bin/python -c 'import torch' >/dev/null 2>&1; then
        .venv/bin/python -m pip install -q "$cpu_torch" >>.venv/pip.log 2>&1 \
            || echo "bootstrap: torch CPU wheel did not install; torch tests will skip" >&2
    fi
    touch "$stamp"
fi
echo "$PWD/.venv"
