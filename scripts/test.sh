#!/usr/bin/env bash
# The whole test suite, from nothing: install (apt + pip), bring up the real local stack (Slurm in
# network namespaces, SeaweedFS S3), run lint, types and every test, and take the stack down again
# if this script brought it up. README's test command and .ci/run both call exactly this. Between
# the two, the stack is switched to its HA mode (up --ha) for tests/integration/test_ha_stack.py.
# Lint, types and the fast tests (`-m "not stack"`: no stack, no root) need none of it: they run in
# the background from the start, while the stack comes up and the stack tests wait on jobs, and
# their output is printed after the stack tests'.
# The Slurm compatibility suite (scripts/compat.sh: tests/compat + tests/contract) runs on each newer
# release in CLUSTERCTL_COMPAT_SLURM (default "24.11 26.05"; "" skips), one after the other on
# stacks of their own, beside the main suite: the two share nothing, and the main suite leaves most
# of the machine idle while it waits on jobs. Its output is printed after the main suite's, also
# when the main suite fails; the script fails when either does.
# The S3-behaviour tests also run against Ceph's RADOS Gateway (`-m ceph`, picked in tests/conftest.py)
# beside the main suite: deploy/local/ceph-s3.sh brings it up (its chroot built once and cached, like
# the Slurm ones; the gateway answers ~20 s after start) and takes it down again if it was not up.
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

# part_result NAME: wait for background part NAME (compat, fast: its ${NAME}_pid and ${NAME}_log),
# print its output, return its status.
part_result() {
    local -n pid="$1_pid" out="$1_log"
    local rc=0
    [ -n "$pid" ] || return 0
    wait "$pid" || rc=$?
    pid=""
    cat "$out"
    rm -f "$out"
    return "$rc"
}
# pytest_part ARGS...: pytest, where "no test selected" (exit 5: the paths given hold none of this
# part's tests) is not a failure.
pytest_part() {
    local rc=0
    python -m pytest -q -p no:cacheprovider "$@" || rc=$?
    [ "$rc" = 5 ] && rc=0
    return "$rc"
}
# kill_tree PID: TERM a process and everything under it (compat.sh's own trap takes its stack down).
kill_tree() {
    local child
    for child in $(pgrep -P "$1"); do kill_tree "$child"; done
    kill -TERM "$1" 2>/dev/null || true
}
# On an early exit (a failed install or stack start), stop the compatibility suite too.
cleanup() {
    if [ -n "$fast_pid" ]; then
        kill_tree "$fast_pid"
        part_result fast || true
    fi
    if [ -n "$compat_pid" ]; then
        kill_tree "$compat_pid"
        part_result compat || true
    fi
    if [ -n "$ceph_pid" ]; then
        kill_tree "$ceph_pid"
        part_result ceph || true
    fi
    if [ "$started_ceph" = 1 ]; then
        bash deploy/local/ceph-s3.sh down >/dev/null 2>&1 || true
    fi
    if [ "$started_stack" = 1 ]; then
        bash deploy/local/stack.sh down >/dev/null 2>&1 || true
    fi
}

compat_pid=""
compat_log=""
ceph_pid=""
ceph_log=""
fast_pid=""
started_stack=0
started_ceph=0
trap cleanup EXIT
fast_log=$(mktemp /tmp/clusterctl-fast.XXXXXX)
(
    echo "== ruff"; ruff check . && ruff format --check . || exit
    echo "== mypy"; mypy || exit
    echo "== pytest -m 'not stack'"; pytest_part -m "not stack" --durations=10 "$@"
) >"$fast_log" 2>&1 &
fast_pid=$!
if ! bash deploy/local/stack.sh status >/dev/null 2>&1; then
    started_stack=1
    bash deploy/local/stack.sh up
fi
# The compatibility suite starts once the 22.05 stack is up: both bring-ups may run apt.
compat_log=$(mktemp /tmp/clusterctl-compat.XXXXXX)
compat_pid=""
if [ -n "${CLUSTERCTL_COMPAT_SLURM-24.11 26.05}" ]; then
    (
        rc=0
        for ver in ${CLUSTERCTL_COMPAT_SLURM-24.11 26.05}; do
            echo "== compat: Slurm $ver"
            bash scripts/compat.sh "$ver" || rc=1
        done
        exit "$rc"
    ) >"$compat_log" 2>&1 &
    compat_pid=$!
fi
# The Ceph half of the S3 tests, once the 22.05 stack is up (the chroot's first build runs apt),
# bounded as a whole (a cluster that never comes up must not hang CI), and here "no test selected"
# (pytest exit 5) fails: nothing was tested. Ceph goes down again below if this script started it,
# whatever became of the part.
ceph_log=$(mktemp /tmp/clusterctl-ceph.XXXXXX)
bash deploy/local/ceph-s3.sh status >/dev/null 2>&1 || started_ceph=1
(
    t0=$SECONDS
    echo "== ceph: S3 tests on Ceph's RADOS Gateway"
    rc=0
    timeout -k 60 "${CLUSTERCTL_CEPH_PART_TIMEOUT:-900}" bash -c 'bash deploy/local/ceph-s3.sh up >/dev/null &&
        python -m pytest -q -p no:cacheprovider -m ceph --durations=5 tests/clusterctl tests/clusterd' || rc=$?
    [ "$rc" = 124 ] && echo "== ceph: timed out after ${CLUSTERCTL_CEPH_PART_TIMEOUT:-900} s"
    if [ "$started_ceph" = 1 ]; then bash deploy/local/ceph-s3.sh down || rc=1; fi
    echo "== ceph: $((SECONDS - t0)) s with the gateway's start and stop"
    exit "$rc"
) >"$ceph_log" 2>&1 &
ceph_pid=$!

# The stack tests; a failure here still waits for the fast part and the compatibility suite and
# prints their output.
run_main() {
    echo "== pytest -m 'stack and not ceph'"; pytest_part -m "stack and not ceph" --durations=25 "$@" || return
    # The stack's own HA mode, as an operator drives it: PostgreSQL and two replicas, one killed.
    echo "== ha: stack.sh up --ha"; bash deploy/local/stack.sh up --ha || return
    python -m pytest -q -p no:cacheprovider tests/integration/test_ha_stack.py
}
main_rc=0
run_main "$@" || main_rc=$?
bash deploy/local/stack.sh up --no-ha >/dev/null
if [ "$started_stack" = 1 ]; then
    bash deploy/local/stack.sh down
    started_stack=0
fi

fast_rc=0
part_result fast || fast_rc=$?
compat_rc=0
part_result compat || compat_rc=$?
ceph_rc=0
part_result ceph || ceph_rc=$?
if [ "$started_ceph" = 1 ]; then
    bash deploy/local/ceph-s3.sh down >/dev/null 2>&1 || ceph_rc=1
    started_ceph=0
fi
trap - EXIT
echo "== lint, types and fast tests exit $fast_rc, stack tests exit $main_rc, compatibility suite exit $compat_rc, Ceph S3 tests exit $ceph_rc"
[ "$fast_rc" = 0 ] && [ "$main_rc" = 0 ] && [ "$compat_rc" = 0 ] && [ "$ceph_rc" = 0 ]
