#!/usr/bin/env bash
# The whole test suite, from nothing: install (apt + pip), bring up the real local stack (Slurm in
# network namespaces, SeaweedFS S3), run lint, types and every test, and take the stack down again
# if this script brought it up. README's test command and .ci/run both call exactly this. Between
# the two, the stack is switched to its HA mode (up --ha) for tests/integration/test_ha_stack.py.
# Then the Slurm compatibility suite (tests/compat + tests/contract) on each newer release in
# CLUSTERCTL_COMPAT_SLURM (default "24.11 26.05"; "" skips), each on its own stack
# (deploy/local/stack.sh up --slurm VER: a debootstrap chroot, built once and cached).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh >/dev/null
# Tools some tests drive when present (tests/deploy): Debian's docker-compose 1.29 validates the
# compose file offline (`config -q`, no engine needed); logrotate and systemd-analyze check the
# systemd snippets. About 15 s once; nothing is installed when they are already there.
test_tools=()
command -v docker-compose >/dev/null || test_tools+=(docker-compose)
command -v logrotate >/dev/null || test_tools+=(logrotate)
command -v systemd-analyze >/dev/null || test_tools+=(systemd)
# The dashboard's browser test (tests/integration/test_dashboard_browser.py) drives Debian's chromium
# through its chromium-driver with Selenium (pip, dev extra): ~300 MB and about a minute, once.
command -v chromium >/dev/null || test_tools+=(chromium)
command -v chromedriver >/dev/null || test_tools+=(chromium-driver)
# PostgreSQL for the store's tests and the HA fault test (tests/support/postgres.py starts its own
# throwaway clusters with initdb/pg_ctl; the stack's --ha mode runs one too).
compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || test_tools+=(postgresql)
if ((${#test_tools[@]})); then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${test_tools[@]}" >/dev/null ||
        { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${test_tools[@]}" >/dev/null; }
fi
export PATH="$PWD/.venv/bin:$PATH"
export CLUSTERCTL_REQUIRE_STACK=1

started_stack=0
if ! bash deploy/local/stack.sh status >/dev/null 2>&1; then
    started_stack=1
    trap 'bash deploy/local/stack.sh down >/dev/null 2>&1 || true' EXIT
    bash deploy/local/stack.sh up
fi

echo "== ruff"; ruff check . && ruff format --check .
echo "== mypy"; mypy
echo "== pytest"
python -m pytest -q -p no:cacheprovider "$@"
# The stack's own HA mode, as an operator drives it: PostgreSQL and two replicas, one killed.
echo "== ha: stack.sh up --ha"
bash deploy/local/stack.sh up --ha
python -m pytest -q -p no:cacheprovider tests/integration/test_ha_stack.py
bash deploy/local/stack.sh up --no-ha
if [ "$started_stack" = 1 ]; then
    bash deploy/local/stack.sh down
    trap - EXIT
fi

for ver in ${CLUSTERCTL_COMPAT_SLURM-24.11 26.05}; do
    echo "== compat: Slurm $ver"
    started=0
    if ! bash deploy/local/stack.sh status --slurm "$ver" >/dev/null 2>&1; then
        started=1
        trap 'bash deploy/local/stack.sh down --slurm "$ver" >/dev/null 2>&1 || true' EXIT
    fi
    # Always `up` (idempotent, a few seconds): it refreshes a running stack's job venv to this checkout.
    bash deploy/local/stack.sh up --slurm "$ver"
    CLUSTERCTL_STACK_DIR="$(bash deploy/local/stack.sh env --slurm "$ver" | xargs dirname)" \
        python -m pytest -q -p no:cacheprovider tests/compat tests/contract
    if [ "$started" = 1 ]; then
        bash deploy/local/stack.sh down --slurm "$ver"
        trap - EXIT
    fi
done
