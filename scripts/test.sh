#!/usr/bin/env bash
# The whole test suite, from nothing: install (apt + pip), bring up the real local stack (Slurm in
# network namespaces, SeaweedFS S3), run lint, types and every test, and take the stack down again
# if this script brought it up. README's test command and .ci/run both call exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh >/dev/null
export PATH="$PWD/.venv/bin:$PATH"
export CLUSTERCTL_REQUIRE_STACK=1

started_stack=0
if ! bash deploy/local/stack.sh status >/dev/null 2>&1; then
    started_stack=1
    trap 'bash deploy/local/stack.sh down >/dev/null 2>&1 || true' EXIT
    bash deploy/local/stack.sh up
fi

echo "== ruff"; ruff check .
echo "== mypy"; mypy
echo "== pytest"
python -m pytest -q -p no:cacheprovider "$@"
if [ "$started_stack" = 1 ]; then
    bash deploy/local/stack.sh down
    trap - EXIT
fi
