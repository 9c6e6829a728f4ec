#!/usr/bin/env bash
# README's first command: install everything, bring up the local stack (Slurm + S3 + clusterd),
# and run the demo: a 2-node training job that checkpoints to S3, watched until it completes,
# then its checkpoints listed. Leaves the stack running; `deploy/local/stack.sh down` stops it.
set -euo pipefail
cd "$(dirname "$0")/../.."
bash scripts/bootstrap.sh >/dev/null
export PATH="$PWD/.venv/bin:$PATH"
env_file="$(bash deploy/local/stack.sh up | tail -n 1)"
# shellcheck disable=SC1090
source "$env_file"

run="demo-$(date +%Y%m%d-%H%M%S)"
uri="s3://$CLUSTERCTL_BUCKET/$run"
# Submit from a directory of alice's, as she would: like sbatch, the job runs there with her rights,
# sees this shell's environment (the S3 settings sourced above, PATH) and writes its output there.
workdir="$CLUSTERCTL_STACK_DIR/jobs/alice"
install -d -o alice -g alice -m 0755 "$workdir"
echo
echo "== submitting a 2-node training job as alice (checkpoints to $uri)"
# The job's python3 is the job environment's (numpy, clusterctl), as a user's activated venv would be.
(cd "$workdir" && PATH="$(dirname "$CLUSTERCTL_JOB_PYTHON"):$PATH" clusterctl submit --job-name "$run" -N 2 --gpus-per-node 1 -t 10 --checkpoint-uri "$uri" \
    -o "%x-%j.out" --wait -- python3 "$CLUSTERCTL_EXAMPLES/train.py" --steps 200 --every 20 --step-seconds 0.02)
echo
echo "== checkpoints"
clusterctl checkpoints list "$uri"
echo
echo "== the job's log: $workdir/$run-*.out"
tail -n 3 "$workdir/$run"-*.out
echo
echo "== clusterd's metrics ($CLUSTERCTL_METRICS)"
curl -s "$CLUSTERCTL_METRICS" | grep -E '^clusterd_(rpcs_total|slurm_calls_total|queue_poll_latency_seconds_count)' | head -n 8
echo
echo "The stack is still up. Try: . $env_file; clusterctl topology; clusterctl list --finished"
echo "Stop it with: bash deploy/local/stack.sh down"
