#!/usr/bin/env bash
# The Slurm compatibility suite (tests/compat + tests/contract) on one newer Slurm release, on that
# release's own stack (deploy/local/stack.sh up --slurm VER: a debootstrap chroot, built once and
# cached). The stack is taken down again if this script brought it up. It shares nothing with the
# 22.05 stack, so scripts/test.sh runs it beside the main suite.
#
#   scripts/compat.sh VER [pytest args...]
set -euo pipefail
cd "$(dirname "$0")/.."
ver="${1:?usage: scripts/compat.sh VER [pytest args...]}"
shift
export PATH="$PWD/.venv/bin:$PATH"
started=0
if ! bash deploy/local/stack.sh status --slurm "$ver" >/dev/null 2>&1; then
    started=1
    trap 'bash deploy/local/stack.sh down --slurm "$ver" >/dev/null 2>&1 || true' EXIT
fi
# Always `up` (idempotent, a few seconds): it refreshes a running stack's job venv to this checkout.
bash deploy/local/stack.sh up --slurm "$ver"
CLUSTERCTL_STACK_DIR="$(bash deploy/local/stack.sh env --slurm "$ver" | xargs dirname)" \
    python -m pytest -q -p no:cacheprovider tests/compat tests/contract "$@"
if [ "$started" = 1 ]; then
    bash deploy/local/stack.sh down --slurm "$ver"
    trap - EXIT
fi
