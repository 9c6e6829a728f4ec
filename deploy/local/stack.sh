#!/usr/bin/env bash
# Single-machine clusterctl test stack: Slurm (6 nodes in network namespaces), munge,
# SeaweedFS (or Ceph) S3, and clusterd. See deploy/local/README.md.
#
#   stack.sh up [--ha|--no-ha] [--nodes N] [--s3 seaweedfs|ceph]
#                                start everything (idempotent), print the env file path; --ha:
#                                PostgreSQL and two clusterd replicas (clusterd-a, clusterd-b, each
#                                restarted when it dies) instead of one clusterd with SQLite. The
#                                choice is kept until `down`: a plain `up` keeps HA, --no-ha leaves it;
#                                --nodes N (1-400, default 6): N Slurm nodes, leaf switches of 16 beyond
#                                6, addresses past one /24 beyond 200; an `up` without it goes back to 6;
#                                --s3 ceph: Ceph's RADOS Gateway (lib/ceph.sh) instead of SeaweedFS, same
#                                address, bucket and keys (kept until `down`; --s3 seaweedfs goes back)
#   stack.sh down [--purge]      stop everything we started, remove namespaces + bridge
#   stack.sh status              one line per component + sinfo; exit 0 iff all up
#   stack.sh kill-node NODE [--power-off]
#                                kill -9 the node's slurmd and everything in its namespace; with
#                                --power-off also take its link down first, as a machine that lost
#                                power: connections to it time out instead of being refused
#   stack.sh revive-node NODE [--keep-drain]
#                                bring its link up, restart its slurmd, resume it until usable
#                                (--keep-drain: only until it responds; a DRAIN stays)
#   stack.sh kill-leader         (HA) SIGKILL the leading replica's clusterd; its supervisor restarts it
#   stack.sh freeze-leader SECS  (HA) SIGSTOP the leading replica's clusterd for SECS seconds, then SIGCONT
#   stack.sh env                 print the path of the env file
#
#   --slurm 22.05|24.11|26.05    which Slurm (any command; default 22.05, the host's packages):
#                                24.11 (Debian trixie) and 26.05 (sid) run from a debootstrap chroot
#                                as their own cluster beside the host's, state in
#                                /var/lib/clusterctl-stack-VER (lib/chroot.sh). Without --slurm, a
#                                command acts on the stack CLUSTERCTL_SLURM or CLUSTERCTL_STACK_DIR
#                                names (its slurm-version file), else on 22.05's.
set -euo pipefail

STACK_HOME="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SLURM_VERSIONS=(22.05 24.11 26.05)
HOST_STACK_DIR=/var/lib/clusterctl-stack

# recorded_version DIR -> the Slurm release the stack in DIR was made for (22.05 before versions).
recorded_version() { if [[ -s "$1/slurm-version" ]]; then cat "$1/slurm-version"; else echo 22.05; fi; }

# Pick the release (--slurm, then CLUSTERCTL_SLURM, then the stack dir's record) and the state dir:
# a CLUSTERCTL_STACK_DIR that holds another release's stack (e.g. exported by the 22.05 env file)
# is not used for this one.
select_slurm() {
    local args=() dir
    SLURM_VERSION=""
    while (($#)); do
        case "$1" in
        --slurm) [[ $# -ge 2 ]] || usage; SLURM_VERSION="$2"; shift 2 ;;
        --slurm=*) SLURM_VERSION="${1#--slurm=}"; shift ;;
        *) args+=("$1"); shift ;;
        esac
    done
    SLURM_VERSION="${SLURM_VERSION:-${CLUSTERCTL_SLURM:-}}"
    dir="${CLUSTERCTL_STACK_DIR:-}"
    if [[ -z "$SLURM_VERSION" ]]; then
        SLURM_VERSION="$(recorded_version "${dir:-$HOST_STACK_DIR}")"
    elif [[ -n "$dir" && -d "$dir" && "$(recorded_version "$dir")" != "$SLURM_VERSION" ]]; then
        unset CLUSTERCTL_STACK_DIR # another release's stack: use this release's own dir
    fi
    [[ " ${SLURM_VERSIONS[*]} " == *" $SLURM_VERSION "* ]] ||
        { echo "[stack] ERROR: --slurm $SLURM_VERSION: known releases are ${SLURM_VERSIONS[*]}" >&2; exit 2; }
    if [[ "$SLURM_VERSION" != 22.05 && -z "${CLUSTERCTL_STACK_DIR:-}" ]]; then
        export CLUSTERCTL_STACK_DIR="$HOST_STACK_DIR-$SLURM_VERSION"
    fi
    ARGS=("${args[@]}")
}

usage() {
    sed -n '2,30p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

select_slurm "$@"
set -- "${ARGS[@]}"
# shellcheck source=lib/common.sh
source "$STACK_HOME/lib/common.sh"
# shellcheck source=lib/debootstrap.sh
source "$STACK_HOME/lib/debootstrap.sh"
# shellcheck source=lib/net.sh
source "$STACK_HOME/lib/net.sh"
# shellcheck source=lib/host.sh
source "$STACK_HOME/lib/host.sh"
# shellcheck source=lib/slurm.sh
source "$STACK_HOME/lib/slurm.sh"
# shellcheck source=lib/s3.sh
source "$STACK_HOME/lib/s3.sh"
# shellcheck source=lib/ceph.sh
source "$STACK_HOME/lib/ceph.sh"
# shellcheck source=lib/jobenv.sh
source "$STACK_HOME/lib/jobenv.sh"
# shellcheck source=lib/clusterd.sh
source "$STACK_HOME/lib/clusterd.sh"
# shellcheck source=lib/ha.sh
source "$STACK_HOME/lib/ha.sh"
if [[ "$SLURM_VERSION" != 22.05 ]]; then
    # shellcheck source=lib/chroot.sh
    source "$STACK_HOME/lib/chroot.sh"
fi

require_root() { ((EUID == 0)) || die "must run as root (network namespaces, slurmd, mknod)"; }

# One stack operation at a time on this machine. Daemons are started with 9>&- so that
# they do not inherit (and hold) the lock.
take_lock() {
    mkdir -p /run/lock
    local lock=/run/lock/clusterctl-stack.lock
    [[ "$SLURM_VERSION" == 22.05 ]] || lock="/run/lock/clusterctl-stack-$SLURM_VERSION.lock"
    exec 9>"$lock"
    flock -w 300 9 || die "another stack.sh is still running (lock $lock)"
}

check_node() {
    local n
    for n in "${NODES[@]}"; do [[ "$n" == "$1" ]] && return 0; done
    die "unknown node '$1' (nodes: ${NODES[*]})"
}

# resize_nodes N: NODES becomes node1..nodeN; the nodes of a bigger earlier `up` are taken down.
resize_nodes() {
    local count="$1" extra=() n
    [[ "$count" =~ ^[1-9][0-9]*$ ]] && ((count <= MAX_NODE_COUNT)) ||
        { echo "[stack] ERROR: --nodes $count: expected 1-$MAX_NODE_COUNT" >&2; exit 2; }
    set_node_count "$(recorded_node_count)"
    for n in "${NODES[@]:count}"; do extra+=("$n"); done
    if ((${#extra[@]})); then
        log "dropping ${#extra[@]} nodes (node$((count + 1))..${NODES[-1]})"
        load_subnet
        slurmd_down "${extra[@]}"
        net_remove_nodes "${extra[@]}"
        NODES=("${extra[@]}")
        remove_netns_hosts
    fi
    set_node_count "$count"
    mkdir -p "$STATE"
    echo "$count" >"$NODE_COUNT_FILE"
}

cmd_up() {
    local t0=$SECONDS ha=-1 count=$DEFAULT_NODE_COUNT s3
    s3="$(s3_server_recorded)"
    while (($#)); do
        case "$1" in
        --s3) [[ $# -ge 2 ]] || usage; s3="$2"; shift ;;
        --s3=*) s3="${1#--s3=}" ;;
        --ha) ha=1 ;;
        --no-ha) ha=0 ;;
        --nodes) [[ $# -ge 2 ]] || usage; count="$2"; shift ;;
        --nodes=*) count="${1#--nodes=}" ;;
        *) usage ;;
        esac
        shift
    done
    [[ " ${S3_SERVERS[*]} " == *" $s3 "* ]] ||
        { echo "[stack] ERROR: --s3 $s3: expected one of ${S3_SERVERS[*]}" >&2; exit 2; }
    if ((ha < 0)); then
        ha=0
        ha_recorded && ha=1 # an HA stack stays HA until `down` or --no-ha
    fi
    resize_nodes "$count"
    mkdir -p "$LOGS"
    ((ha)) && APT_EXTRA=("${HA_EXTRA_PACKAGES[@]}")
    install_packages
    ensure_users
    ensure_fake_gpus
    ensure_state_dirs
    ensure_tokens
    net_up
    log "bridge $BRIDGE $BRIDGE_ADDR/$(net_len); ${#NODES[@]} nodes at $(node_addr node1)..$(node_addr "${NODES[-1]}")"
    s3_start "$s3" # the S3 server boots while Slurm starts; s3_wait_ready below
    munge_up
    ensure_jwt_key
    write_slurm_config
    slurmctld_up
    slurmd_start_all "${NODES[@]}"
    slurmrestd_up
    SLURM_CONFIG_CHANGED=0
    wait_nodes_usable "$STACK_TIMEOUT" "${NODES[@]}" || die "Slurm nodes did not become IDLE (logs under $LOGS)"
    log "slurm: ${#NODES[@]} nodes up"
    s3_wait_ready
    log "s3 ($s3): bucket $BUCKET ready at $(s3_endpoint)"
    jobenv_up
    if ((ha)); then
        clusterd_down # switching from one clusterd: its SQLite store stays in $STATE/clusterd
        touch "$HA_MARK"
        write_env_file
        ha_up
    else
        ha_recorded && log "leaving HA: stopping the replicas and PostgreSQL (its data stays in $PG_DATA)"
        ha_down
        write_env_file
        clusterd_up
    fi
    log "stack up in $((SECONDS - t0))s (Slurm $SLURM_VERSION$( ((ha)) && echo ", HA: PostgreSQL + ${REPLICAS[*]}"))"
    echo "$ENV_FILE"
}

cmd_down() {
    local purge=0 n
    [[ "${1:-}" == "--purge" ]] && purge=1
    load_subnet
    clusterd_down
    ha_down
    weed_down
    stack_ceph_down
    rm -f "$S3_SERVER_FILE"
    slurmrestd_down
    slurmd_down "${NODES[@]}"
    slurmctld_down
    munge_down
    net_down
    [[ "$SLURM_VERSION" == 22.05 ]] || chroot_umount
    if ((purge)); then
        log "purging $STATE and the generated Slurm config"
        remove_slurm_config
        rm -rf --one-file-system "$STATE"
    fi
    log "stack down"
}

cmd_status() {
    local ok=0 n
    load_subnet
    status_line() { # NAME RUNNING(0|1) DETAIL
        if (($2)); then
            printf '%-16s running  %s\n' "$1" "$3"
        else
            printf '%-16s STOPPED  %s\n' "$1" "$3"
            ok=1
        fi
    }
    up_if() { if "$@" >/dev/null 2>&1; then echo 1; else echo 0; fi; }
    pid_text() { # PIDFILE -> "pid N " for a live recorded process, else nothing
        if pid_alive "$1"; then printf 'pid %s ' "$(pid_of "$1")"; fi
    }
    status_line munge "$(up_if munge_works)" ""
    status_line slurmctld "$(up_if slurmctld_running)" "$(pid_text "$RUN/slurmctld.pid")on $BRIDGE_ADDR:$SLURMCTLD_PORT"
    for n in "${NODES[@]}"; do
        status_line "slurmd $n" "$(up_if slurmd_running "$n")" \
            "$(pid_text "$(slurmd_pidfile "$n")")netns $(node_ns "$n") $(node_addr "$n")"
    done
    status_line slurmrestd "$(up_if slurmrestd_running)" "$(pid_text "$RUN/slurmrestd.pid")http://$RESTD_LISTEN, unix:$RESTD_SOCKET (JWT)"
    if [[ "$(s3_server_recorded)" == ceph ]]; then
        status_line ceph-rgw "$(up_if s3_running)" "$(pid_text "$STATE/ceph/run/radosgw.pid")s3 http://$BRIDGE_ADDR:$S3_PORT (Ceph: mon, OSD, radosgw)"
    else
        status_line weed "$(up_if weed_running)" "$(pid_text "$RUN/weed.pid")s3 http://$BRIDGE_ADDR:$S3_PORT"
    fi
    if ha_recorded; then
        status_line postgresql "$(up_if pg_running)" "$(pid_text "$PG_PIDFILE")socket $PG_SOCKET_DIR, database $PG_DB"
        for n in "${REPLICAS[@]}"; do
            status_line "$n" "$(up_if replica_running "$n")" \
                "$(pid_text "$(replica_pidfile "$n")")$(replica_status_role "$n") on $(replica_listen "$n"), metrics http://$(replica_metrics "$n")/metrics, dashboard http://$(replica_web "$n")/$(replica_supervised "$n" || echo ", NO SUPERVISOR")"
        done
    elif clusterd_installed; then
        status_line clusterd "$(up_if clusterd_running)" \
            "$(pid_text "$CLUSTERD_PID")on $CLUSTERD_LISTEN, metrics http://$CLUSTERD_METRICS_LISTEN/metrics, dashboard http://$CLUSTERD_WEB_LISTEN/"
    else
        printf '%-16s skipped  (not installed, or CLUSTERCTL_STACK_NO_CLUSTERD=1)\n' clusterd
    fi
    if slurmctld_running; then
        echo
        sinfo || ok=1
    fi
    return "$ok"
}

cmd_kill_node() {
    local n="$1" mode="${2:-}"
    check_node "$n"
    netns_exists "$n" || die "namespace $n does not exist (is the stack up?)"
    case "$mode" in
    "") ;;
    --power-off)
        log "powering off node $n: link down"
        ip link set "$(node_veth "$n")" down
        ;;
    *) usage ;;
    esac
    log "killing node $n (slurmd + every process in netns $n)"
    slurmd_kill "$n"
}

cmd_revive_node() {
    local n="$1" how="${2:-}" deadline s
    check_node "$n"
    [[ -z "$how" || "$how" == --keep-drain ]] || usage
    load_subnet
    netns_exists "$n" || die "namespace $n does not exist (is the stack up?)"
    ip link set "$(node_veth "$n")" up  # after kill-node --power-off
    SLURM_CONFIG_CHANGED=0
    slurmd_start "$n"
    if [[ -z "$how" ]]; then
        wait_nodes_usable "$STACK_TIMEOUT" "$n" || die "node $n did not come back"
    else # responding (no '*'), not DOWN: a drain someone set is theirs to lift
        deadline=$((SECONDS + STACK_TIMEOUT))
        while s="$(node_state "$n")"; [[ -z "$s" || "$s" == *'*' || "$s" == down* ]]; do
            ((SECONDS < deadline)) || die "node $n did not respond (state $s)"
            sleep 0.2
        done
    fi
    log "node $n is $(node_state "$n")"
}

cmd_kill_leader() {
    local name pid epoch
    ha_recorded || die "not an HA stack: '$0 up --ha' first"
    read -r name pid epoch < <(wait_leader "$STACK_TIMEOUT") || die "no leader to kill"
    kill -KILL "$pid"
    log "killed the leader $name (clusterd pid $pid${epoch:+, lease epoch $epoch}) with SIGKILL; its supervisor restarts it as a follower"
    echo "$name $pid"
}

cmd_freeze_leader() {
    local secs="$1" name pid epoch
    [[ "$secs" =~ ^[0-9]+([.][0-9]+)?$ ]] || usage
    ha_recorded || die "not an HA stack: '$0 up --ha' first"
    read -r name pid epoch < <(wait_leader "$STACK_TIMEOUT") || die "no leader to freeze"
    trap 'kill -CONT "$pid" 2>/dev/null' EXIT
    kill -STOP "$pid"
    log "froze the leader $name (clusterd pid $pid${epoch:+, lease epoch $epoch}) with SIGSTOP for ${secs}s"
    echo "$name $pid"
    sleep "$secs"
    kill -CONT "$pid" 2>/dev/null || true
    trap - EXIT
    log "thawed $name (pid $pid) with SIGCONT"
}

main() {
    local cmd="${1:-}"
    [[ -n "$cmd" ]] || usage
    shift
    case "$cmd" in
    up) require_root; take_lock; cmd_up "$@" ;;
    down) require_root; take_lock; cmd_down "$@" ;;
    status) cmd_status ;;
    kill-node) [[ $# -ge 1 && $# -le 2 ]] || usage; require_root; cmd_kill_node "$@" ;;
    revive-node) [[ $# -ge 1 && $# -le 2 ]] || usage; require_root; cmd_revive_node "$@" ;;
    kill-leader) [[ $# -eq 0 ]] || usage; require_root; cmd_kill_leader ;;
    freeze-leader) [[ $# -eq 1 ]] || usage; require_root; cmd_freeze_leader "$1" ;;
    env)
        [[ -s "$ENV_FILE" ]] || die "no env file yet: run '$0 up' first"
        echo "$ENV_FILE"
        ;;
    -h | --help | help) usage ;;
    *) usage ;;
    esac
}

main "$@"
