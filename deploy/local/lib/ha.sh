# shellcheck shell=bash disable=SC2034  # settings and locals used by stack.sh and write_clusterd_config
# HA: PostgreSQL and two clusterd replicas, each under its own restart supervisor
# (lib/supervise.sh), instead of the single clusterd with SQLite. `up --ha` selects it and records
# it in $HA_MARK; a later plain `up` keeps it, `up --no-ha` switches back, `down` forgets it.

HA_MARK="$STATE/ha"
REPLICAS=(clusterd-a clusterd-b)
HA_EXTRA_PACKAGES=(postgresql) # Debian 12: PostgreSQL 15 (its own `main` cluster is never started)

# PostgreSQL: data under the state dir, owned by postgres; a unix socket only (no TCP), in a directory
# only postgres (and root) can enter. clusterd runs as root: peer authentication maps it to role root.
PG_DATA="$STATE/postgres"
PG_SOCKET_DIR="$RUN/postgres"
PG_PIDFILE="$RUN/postgres.pid"
PG_LOG="$LOGS/postgres.log"
PG_DB=clusterd
PG_ROLE=root
STORE_URL="postgresql:///$PG_DB?host=$PG_SOCKET_DIR&user=$PG_ROLE"
LEASE_NAME=supervisor # the lease row (in the store) that the leader holds

ha_recorded() { [[ -f "$HA_MARK" ]]; }

# -------------------------------------------------------------------------------- replicas

# Replica i (0, 1, ...): own socket, state dir, config, log and pid files; metrics port = the single
# clusterd's + i (9464, 9465 on the 22.05 stack).
replica_index() {
    local i
    for i in "${!REPLICAS[@]}"; do [[ "${REPLICAS[$i]}" == "$1" ]] && { echo "$i"; return 0; }; done
    die "unknown replica '$1' (replicas: ${REPLICAS[*]})"
}
replica_socket() { echo "$RUN/$1/clusterd.sock"; }
replica_listen() { echo "unix:$(replica_socket "$1")"; }
replica_metrics() { echo "${CLUSTERD_METRICS_LISTEN%:*}:$((${CLUSTERD_METRICS_LISTEN##*:} + $(replica_index "$1")))"; }
replica_web() { echo "${CLUSTERD_WEB_LISTEN%:*}:$((${CLUSTERD_WEB_LISTEN##*:} + $(replica_index "$1")))"; }
replica_config() { echo "$STATE/$1.toml"; }
replica_state_dir() { echo "$STATE/$1"; }
replica_log() { echo "$STATE/$1.log"; }
replica_pidfile() { echo "$RUN/$1.pid"; }                # the clusterd process (kill-leader's target)
replica_supervisor_pidfile() { echo "$RUN/supervise-$1.pid"; } # its restart loop
replica_running() { pid_alive "$(replica_pidfile "$1")"; }
replica_supervised() { pid_alive "$(replica_supervisor_pidfile "$1")"; }

# joined SEP WORD... -> the words joined by SEP.
joined() {
    local sep="$1" out="" w
    shift
    for w in "$@"; do out+="${out:+$sep}$w"; done
    echo "$out"
}
ha_addrs() {
    local r a=()
    for r in "${REPLICAS[@]}"; do a+=("$(replica_listen "$r")"); done
    joined , "${a[@]}"
}
ha_healthz_urls() {
    local r a=()
    for r in "${REPLICAS[@]}"; do a+=("http://$(replica_metrics "$r")/healthz"); done
    joined , "${a[@]}"
}

# The env file's lines for HA (after write_env_file's; CLUSTERCTL_ADDR is already both replicas).
ha_env_lines() {
    cat <<EOF
export CLUSTERCTL_HA=1
export CLUSTERCTL_REPLICAS="${REPLICAS[*]}"
export CLUSTERCTL_HEALTHZ=$(ha_healthz_urls)
export CLUSTERCTL_STORE_URL='$STORE_URL'
EOF
}

# write_replica_config NAME: the single clusterd's config (template, and lib/chroot.sh's additions)
# with this replica's listen, metrics and state dir, then templates/clusterd-ha.toml.
write_replica_config() {
    local name="$1" fragment metrics web
    metrics="$(replica_metrics "$name")" # from the global CLUSTERD_METRICS_LISTEN, before the local below
    web="$(replica_web "$name")"
    local CLUSTERD_CONFIG CLUSTERD_LISTEN CLUSTERD_METRICS_LISTEN="$metrics" CLUSTERD_WEB_LISTEN="$web" CLUSTERD_STATE_DIR
    CLUSTERD_CONFIG="$(replica_config "$name")"
    CLUSTERD_LISTEN="$(replica_listen "$name")"
    CLUSTERD_STATE_DIR="$(replica_state_dir "$name")"
    write_clusterd_config
    fragment="$CLUSTERD_CONFIG.ha"
    render "$STACK_HOME/templates/clusterd-ha.toml" "$fragment" "STORE_URL=$STORE_URL" "HEARTBEAT_ADDR=$(ha_addrs)"
    { echo; cat "$fragment"; } >>"$CLUSTERD_CONFIG"
    rm -f "$fragment"
    chmod 644 "$CLUSTERD_CONFIG"
}

# clusterd_accepts CONFIG -> 0 when the installed clusterd's loader takes CONFIG (a clusterd from
# without HA support refuses [store] and [ha]: "unknown config key").
clusterd_accepts() {
    local py
    py="$(head -n 1 "$(clusterd_bin)" | sed -n 's/^#! *//p' | cut -d' ' -f1)"
    [[ -x "$py" ]] || py=python3
    "$py" -c 'import sys; from clusterd.config import load_config; load_config(sys.argv[1], environ={})' "$1" 2>"$LOGS/clusterd-config.stderr"
}

replica_start() {
    local name="$1" clusterd_bin
    replica_supervised "$name" && return 0
    mkdir -p "$(replica_state_dir "$name")"
    chmod 700 "$(replica_state_dir "$name")" # the audit log: every user's calls
    private_log "$(replica_log "$name")"
    clusterd_bin="$(clusterd_bin)"
    log "starting $name on $(replica_listen "$name") (metrics $(replica_metrics "$name"), restarted when it dies)"
    (
        # shellcheck disable=SC1090
        source "$ENV_FILE"
        cd "$STATE" || exit 1
        setsid bash "$STACK_HOME/lib/supervise.sh" "$name" "$(replica_pidfile "$name")" -- \
            "$clusterd_bin" serve --config "$(replica_config "$name")" \
            </dev/null >>"$(replica_log "$name")" 2>&1 9>&- &
        echo $! >"$(replica_supervisor_pidfile "$name")"
    )
}

# replica_healthz NAME -> its /healthz JSON ({"role": "leader"|"follower"|"not ready", "replica": ..., "epoch": N}),
# or nothing when it does not answer within a second (down, frozen, or a clusterd without /healthz).
replica_healthz() { curl -fsS --max-time 1 "http://$(replica_metrics "$1")/healthz" 2>/dev/null || true; }
json_role() { sed -n 's/.*"role" *: *"\([^"]*\)".*/\1/p' <<<"$1"; }
json_epoch() { sed -n 's/.*"epoch" *: *\([0-9-]*\).*/\1/p' <<<"$1"; }
replica_role() { json_role "$(replica_healthz "$1")"; }

ha_replicas_up() {
    local r deadline
    if ! clusterd_installed; then
        warn "'clusterd' is not installed or CLUSTERCTL_STACK_NO_CLUSTERD=1: skipping the replicas"
        return 0
    fi
    for r in "${REPLICAS[@]}"; do write_replica_config "$r"; done
    if ! clusterd_accepts "$(replica_config "${REPLICAS[0]}")"; then
        show_tail "$LOGS/clusterd-config.stderr"
        die "this clusterd ($(clusterd_bin)) does not take the HA config ([store], [ha]; install this checkout's clusterd): PostgreSQL is up, the replicas' configs are $STATE/clusterd-{a,b}.toml, no replica started"
    fi
    local -A log_lines=()
    for r in "${REPLICAS[@]}"; do
        log_lines[$r]="$(wc -l <"$(replica_log "$r")" 2>/dev/null || echo 0)"
        replica_start "$r"
    done
    deadline=$((SECONDS + STACK_TIMEOUT))
    for r in "${REPLICAS[@]}"; do
        until unix_open "$(replica_socket "$r")"; do
            if ! replica_supervised "$r"; then
                show_tail "$(replica_log "$r")"
                die "the supervisor of $r exited (log: $(replica_log "$r"))"
            fi
            # Its supervisor restarts it with growing pauses: three exits of its own are enough to know.
            if (($(tail -n "+$((log_lines[$r] + 1))" "$(replica_log "$r")" | grep -c ': pid [0-9]* exited with status') >= 3)); then
                show_tail "$(replica_log "$r")"
                die "$r keeps exiting at startup (log: $(replica_log "$r")); its supervisor keeps trying until '$0 down'"
            fi
            if ((SECONDS >= deadline)); then
                show_tail "$(replica_log "$r")"
                die "$r does not accept connections on $(replica_listen "$r") after ${STACK_TIMEOUT}s"
            fi
            sleep 0.5
        done
    done
    # One of them takes the lease within lease_seconds or so.
    local quiet_until=$((SECONDS + 10))
    until ha_leader >/dev/null; do
        if [[ "$(ha_roles)" != *=[a-z]* ]] && ((SECONDS >= quiet_until)); then
            warn "no replica answers /healthz on its metrics listener: not waiting for a leader"
            break
        fi
        if ((SECONDS >= deadline)); then
            for r in "${REPLICAS[@]}"; do show_tail "$(replica_log "$r")"; done
            die "no replica became leader within ${STACK_TIMEOUT}s (roles: $(ha_roles))"
        fi
        sleep 0.2
    done
    log "replicas up: $(ha_roles)"
}

# replica_status_role NAME -> "leader epoch 3", "follower epoch 3", ... for `status`.
replica_status_role() {
    local h role epoch
    h="$(replica_healthz "$1")"
    role="$(json_role "$h")"
    epoch="$(json_epoch "$h")"
    if [[ -z "$role" ]]; then
        echo "role ? (no answer from /healthz)"
    else
        echo "$role${epoch:+ epoch $epoch}"
    fi
}

ha_roles() {
    local r out=()
    for r in "${REPLICAS[@]}"; do out+=("$r=$(replica_role "$r")"); done
    echo "${out[*]}"
}

ha_replicas_down() {
    local r specs=()
    # The supervisors first (each stops its clusterd, TERM then KILL), then any clusterd left over.
    for r in "${REPLICAS[@]}"; do specs+=("supervisor of $r=$(replica_supervisor_pidfile "$r")"); done
    stop_pidfiles 20 "${specs[@]}"
    specs=()
    for r in "${REPLICAS[@]}"; do specs+=("$r=$(replica_pidfile "$r")"); done
    stop_pidfiles 10 "${specs[@]}"
}

# ha_leader -> "NAME PID EPOCH" of the replica that is leader now: the one whose /healthz says so; when
# none or several do (a frozen leader does not answer), the holder of the lease row
# ("<hostname>:<pid>") if that pid is one of the replicas. Exit 1 when there is none.
ha_leader() {
    local r h leaders=() epochs=() holder pid
    for r in "${REPLICAS[@]}"; do
        h="$(replica_healthz "$r")"
        if [[ "$(json_role "$h")" == leader ]] && replica_running "$r"; then
            leaders+=("$r")
            epochs+=("$(json_epoch "$h")")
        fi
    done
    if ((${#leaders[@]} == 1)); then
        echo "${leaders[0]} $(pid_of "$(replica_pidfile "${leaders[0]}")") ${epochs[0]}"
        return 0
    fi
    holder="$(pg_query "SELECT holder FROM leases WHERE name = '$LEASE_NAME'" 2>/dev/null)" || return 1
    pid="${holder##*:}"
    for r in "${REPLICAS[@]}"; do
        if replica_running "$r" && [[ "$(pid_of "$(replica_pidfile "$r")")" == "$pid" ]]; then
            echo "$r $pid $(pg_query "SELECT epoch FROM leases WHERE name = '$LEASE_NAME'" 2>/dev/null || true)"
            return 0
        fi
    done
    return 1
}

# wait_leader SECONDS -> ha_leader's line, waiting for a new leader after a failover.
wait_leader() {
    local deadline=$((SECONDS + $1)) line
    until line="$(ha_leader)"; do
        ((SECONDS < deadline)) || { warn "no leader after $1 s (roles: $(ha_roles))"; return 1; }
        sleep 0.2
    done
    echo "$line"
}

# ------------------------------------------------------------------------------ PostgreSQL

pg_bin() {
    local d
    d="$(find /usr/lib/postgresql -mindepth 2 -maxdepth 2 -name bin -type d 2>/dev/null | sort -V | tail -n 1)"
    [[ -n "$d" && -x "$d/pg_ctl" ]] || return 1
    echo "$d"
}
pg_running() { pid_alive "$PG_PIDFILE" && "$(pg_bin)/pg_isready" -q -h "$PG_SOCKET_DIR" -d "$PG_DB" -t 2; }
# pg_record_pid: $PG_PIDFILE from the postmaster's own (first line), where one is running.
pg_record_pid() { [[ -s "$PG_DATA/postmaster.pid" ]] && head -n 1 "$PG_DATA/postmaster.pid" >"$PG_PIDFILE"; }

# as_postgres CMD...: run as the postgres user from a directory it can read.
as_postgres() { (cd / && runuser -u postgres -- "$@"); }

# pg_query SQL -> the rows, unaligned, as role root (peer) in database clusterd.
pg_query() { "$(pg_bin)/psql" -h "$PG_SOCKET_DIR" -U "$PG_ROLE" -d "$PG_DB" -qAtX -v ON_ERROR_STOP=1 -c "$1"; }
pg_admin() { as_postgres "$(pg_bin)/psql" -h "$PG_SOCKET_DIR" -d postgres -qAtX -v ON_ERROR_STOP=1 -c "$1"; }

pg_up() {
    local bin
    bin="$(pg_bin)" || die "PostgreSQL is not installed (apt-get install postgresql)"
    install -d -o postgres -g postgres -m 700 "$PG_DATA"
    install -d -o postgres -g postgres -m 750 "$PG_SOCKET_DIR"
    touch "$PG_LOG"
    chown postgres:postgres "$PG_LOG"
    if [[ ! -s "$PG_DATA/PG_VERSION" ]]; then
        log "initdb $PG_DATA ($("$bin/postgres" --version))"
        as_postgres "$bin/initdb" -D "$PG_DATA" -E UTF8 --no-locale --auth-local=peer --auth-host=reject \
            >"$LOGS/initdb.log" 2>&1 || { show_tail "$LOGS/initdb.log"; die "initdb failed"; }
        echo "include_if_exists = 'clusterctl-stack.conf'" >>"$PG_DATA/postgresql.conf"
    fi
    # Rewritten by every `up`: no TCP listener, the socket under the stack's run dir.
    cat >"$PG_DATA/clusterctl-stack.conf" <<EOF
# generated by clusterctl deploy/local/stack.sh (lib/ha.sh) at every up --ha
listen_addresses = ''
unix_socket_directories = '$PG_SOCKET_DIR'
unix_socket_permissions = 0770
max_connections = 100
EOF
    chown postgres:postgres "$PG_DATA/clusterctl-stack.conf"
    pg_record_pid || true
    if ! pid_alive "$PG_PIDFILE"; then
        log "starting PostgreSQL (socket in $PG_SOCKET_DIR, data $PG_DATA)"
        as_postgres "$bin/pg_ctl" -D "$PG_DATA" -l "$PG_LOG" -w -t "$STACK_TIMEOUT" start >/dev/null 9>&- ||
            { show_tail "$PG_LOG"; die "PostgreSQL did not start (log: $PG_LOG)"; }
    fi
    pg_record_pid || die "PostgreSQL started but wrote no $PG_DATA/postmaster.pid"
    wait_for "PostgreSQL on $PG_SOCKET_DIR" "$STACK_TIMEOUT" "$bin/pg_isready" -q -h "$PG_SOCKET_DIR" ||
        { show_tail "$PG_LOG"; die "PostgreSQL does not accept connections"; }
    [[ "$(pg_admin "SELECT 1 FROM pg_roles WHERE rolname = '$PG_ROLE'")" == 1 ]] ||
        pg_admin "CREATE ROLE $PG_ROLE LOGIN" >/dev/null
    [[ "$(pg_admin "SELECT 1 FROM pg_database WHERE datname = '$PG_DB'")" == 1 ]] ||
        pg_admin "CREATE DATABASE $PG_DB OWNER $PG_ROLE" >/dev/null
    log "postgresql: database $PG_DB ready ($STORE_URL)"
}

pg_down() {
    local bin
    pg_record_pid 2>/dev/null || true
    pid_alive "$PG_PIDFILE" || { rm -f "$PG_PIDFILE"; return 0; }
    log "stopping PostgreSQL (pid $(pid_of "$PG_PIDFILE"))"
    # pg_ctl waits until the postmaster has removed its pid file (a zombie until its parent reaps it).
    if bin="$(pg_bin)" && as_postgres "$bin/pg_ctl" -D "$PG_DATA" -m fast -w -t 20 stop >/dev/null 2>&1; then
        rm -f "$PG_PIDFILE"
    else
        stop_pidfile postgres "$PG_PIDFILE" 10
    fi
}

# ---------------------------------------------------------------------------- up / down

ha_up() {
    touch "$HA_MARK" # status, down and kill-leader look for the replicas from now on
    pg_up
    ha_replicas_up
}

ha_down() {
    ha_replicas_down
    pg_down
    rm -f "$HA_MARK"
}
