# shellcheck shell=bash
# munge, Slurm configuration, slurmctld (root namespace) and one slurmd per node namespace.

MUNGE_KEY=/etc/munge/munge.key
MUNGE_SOCKET_DIR=/run/munge
NODE_CPUS="${CLUSTERCTL_NODE_CPUS:-4}"
NODE_MEMORY_MB="${CLUSTERCTL_NODE_MEMORY_MB:-2048}"

# ---------------------------------------------------------------- munge
munge_works() { munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }

munge_up() {
    if [[ ! -s "$MUNGE_KEY" ]]; then
        log "creating munge key $MUNGE_KEY"
        mkdir -p /etc/munge
        if command -v mungekey >/dev/null 2>&1; then
            mungekey --create --keyfile="$MUNGE_KEY" --force
        else
            dd if=/dev/urandom of="$MUNGE_KEY" bs=1 count=1024 status=none
        fi
    fi
    chown munge:munge /etc/munge "$MUNGE_KEY"
    chmod 700 /etc/munge
    chmod 400 "$MUNGE_KEY"
    if munge_works; then
        return 0 # ours (pid file) or a system munged: either way usable
    fi
    mkdir -p "$MUNGE_SOCKET_DIR" /var/lib/munge /var/log/munge
    chown munge:munge "$MUNGE_SOCKET_DIR" /var/lib/munge /var/log/munge
    chmod 755 "$MUNGE_SOCKET_DIR"
    log "starting munged"
    # The socket is a path on the shared filesystem, so it is reachable from every namespace.
    rm -f "$MUNGE_SOCKET_DIR/munged.pid"
    runuser -u munge -- /usr/sbin/munged --force 9>&- 2>>"$LOGS/munged.log" ||
        {
            show_tail "$LOGS/munged.log" /var/log/munge/munged.log
            die "munged failed to start"
        }
    wait_for "munged" 20 munge_works || {
        show_tail /var/log/munge/munged.log
        die "munge does not answer"
    }
    # Record the pid in our run dir: `down` stops only a munged that `up` started.
    if [[ -s "$MUNGE_SOCKET_DIR/munged.pid" ]]; then
        cp -f "$MUNGE_SOCKET_DIR/munged.pid" "$RUN/munged.pid"
    fi
}

munge_down() {
    # Only a munged we started has our pid file; a system munged is left alone.
    stop_pidfile munged "$RUN/munged.pid" 10
}

# ---------------------------------------------------------------- JWT key
# One 32-byte HS256 key, generated once and kept across up/down (slurm.conf names it in
# AuthAltParameters). Owned by root (SlurmUser), 0600: whoever reads it can act as any user.
ensure_jwt_key() {
    if [[ ! -s "$JWT_KEY_FILE" ]]; then
        log "creating JWT key $JWT_KEY_FILE"
        mkdir -p "$(dirname "$JWT_KEY_FILE")"
        (
            umask 077
            dd if=/dev/urandom of="$JWT_KEY_FILE.tmp" bs=32 count=1 status=none
        )
        mv -f "$JWT_KEY_FILE.tmp" "$JWT_KEY_FILE"
    fi
    chown root:root "$JWT_KEY_FILE"
    chmod 600 "$JWT_KEY_FILE"
}

# ---------------------------------------------------------------- configuration
node_lines() {
    local n
    for n in "${NODES[@]}"; do
        printf 'NodeName=%s NodeAddr=%s CPUs=%s Boards=1 SocketsPerBoard=1 CoresPerSocket=%s ThreadsPerCore=1 RealMemory=%s Gres=gpu:4 State=UNKNOWN\n' \
            "$n" "$(node_addr "$n")" "$NODE_CPUS" "$NODE_CPUS" "$NODE_MEMORY_MB"
    done
}

# write_topology FILE: the switch tree for NODES. The default six nodes keep the template's two
# leaves of three under one spine (what the tests assume); more nodes get leaves of 16 under
# spines of 16 leaves, and one core switch above the spines when there are several.
write_topology() {
    local out="$1" count=${#NODES[@]} leaves spines l s lo hi name
    if ((count == DEFAULT_NODE_COUNT)); then
        cp "$STACK_HOME/templates/topology.conf" "$out"
        return
    fi
    leaves=$(((count + 15) / 16))
    spines=$(((leaves + 15) / 16))
    {
        echo "$SLURM_MARKER -- $count nodes (write_topology in deploy/local/lib/slurm.sh)"
        for ((l = 1; l <= leaves; l++)); do
            lo=$(((l - 1) * 16 + 1)) hi=$((l * 16 > count ? count : l * 16))
            echo "SwitchName=leaf$l Nodes=node[$lo-$hi]"
        done
        for ((s = 1; s <= spines; s++)); do
            lo=$(((s - 1) * 16 + 1)) hi=$((s * 16 > leaves ? leaves : s * 16))
            name=spine
            ((spines > 1)) && name="spine$s"
            echo "SwitchName=$name Switches=leaf[$lo-$hi]"
        done
        if ((spines > 1)); then echo "SwitchName=core Switches=spine[1-$spines]"; fi
    } >"$out"
}

# write_slurm_config -> sets SLURM_CONFIG_CHANGED=1 when any file changed.
write_slurm_config() {
    local tpl="$STACK_HOME/templates" tmp f
    mkdir -p "$SLURM_ETC"
    if [[ -s "$SLURM_CONF_PATH" ]] && ! head -n1 "$SLURM_CONF_PATH" | grep -qF "$SLURM_MARKER"; then
        local backup
        backup="$SLURM_CONF_PATH.before-clusterctl.$(date +%s)"
        warn "$SLURM_CONF_PATH was not written by this stack; moving it to $backup"
        mv "$SLURM_CONF_PATH" "$backup"
    fi
    tmp="$(mktemp -d)"
    render "$tpl/slurm.conf" "$tmp/slurm.conf" \
        "CTLD_HOST=$(hostname -s)" "BRIDGE_ADDR=$BRIDGE_ADDR" "STATE=$STATE" \
        "SLURMD_TIMEOUT=$SLURMD_TIMEOUT" "JWT_KEY=$JWT_KEY_FILE" "NODE_LINES=$(node_lines)" \
        "CTLD_PORT=$SLURMCTLD_PORT" "SLURMD_PORT=$SLURMD_PORT" "SCHED_PARAMS=$SCHED_PARAMS"
    write_topology "$tmp/topology.conf"
    cp "$tpl/gres.conf" "$tmp/gres.conf"
    cp "$tpl/cgroup.conf" "$tmp/cgroup.conf"
    SLURM_CONFIG_CHANGED=0
    for f in slurm.conf topology.conf gres.conf cgroup.conf; do
        if ! cmp -s "$tmp/$f" "$SLURM_ETC/$f"; then
            SLURM_CONFIG_CHANGED=1
            install -m 644 "$tmp/$f" "$SLURM_ETC/$f"
        fi
    done
    rm -rf "$tmp"
    # A copy for people reading the state dir.
    mkdir -p "$STATE/etc"
    cp "$SLURM_ETC"/{slurm,topology,gres,cgroup}.conf "$STATE/etc/"
}

remove_slurm_config() {
    local f
    if [[ -s "$SLURM_CONF_PATH" ]] && head -n1 "$SLURM_CONF_PATH" | grep -qF "$SLURM_MARKER"; then
        for f in slurm.conf topology.conf gres.conf cgroup.conf; do
            rm -f "$SLURM_ETC/$f"
        done
    fi
}

# ---------------------------------------------------------------- slurmctld
slurmctld_running() { pid_alive "$RUN/slurmctld.pid"; }

slurmctld_up() {
    if slurmctld_running; then
        if ((SLURM_CONFIG_CHANGED)); then
            log "slurm config changed: restarting slurmctld"
            stop_pidfile slurmctld "$RUN/slurmctld.pid" 20
        else
            return 0
        fi
    fi
    log "starting slurmctld on $BRIDGE_ADDR:$SLURMCTLD_PORT"
    "${SLURM_EXEC[@]}" /usr/sbin/slurmctld -f "$SLURM_CONF_PATH" 9>&- 2>>"$LOGS/slurmctld.stderr" ||
        {
            show_tail "$LOGS/slurmctld.stderr" "$LOGS/slurmctld.log"
            die "slurmctld failed to start"
        }
    wait_for "slurmctld to answer" "$STACK_TIMEOUT" scontrol ping || {
        show_tail "$LOGS/slurmctld.stderr" "$LOGS/slurmctld.log"
        die "slurmctld does not answer 'scontrol ping'"
    }
}

slurmctld_down() { stop_pidfile slurmctld "$RUN/slurmctld.pid" 20; }

# ---------------------------------------------------------------- slurmd
slurmd_pidfile() { echo "$RUN/slurmd-$1.pid"; }
slurmd_running() { pid_alive "$(slurmd_pidfile "$1")"; }

slurmd_start() {
    local n="$1"
    if slurmd_running "$n"; then
        if ((${SLURM_CONFIG_CHANGED:-0})); then
            stop_pidfile "slurmd $n" "$(slurmd_pidfile "$n")" 10
        else
            return 0
        fi
    fi
    mkdir -p "$STATE/slurm/spool/$n"
    # Own UTS namespace: `hostname` in a job prints the node name, which resolves (through
    # /etc/netns/$n/hosts, bind-mounted by `ip netns exec`) to the node's address. Own mount
    # namespace with a private tmpfs on /dev/shm (and the chroot's): the node's memory, which no
    # other node sees and which kill-node frees with the last process of the node.
    local shm=/dev/shm
    [[ -z "${CHROOT:-}" ]] || shm="/dev/shm $CHROOT/dev/shm"
    # shellcheck disable=SC2016  # $1/$2/$@ expand in the inner shell
    ip netns exec "$(node_ns "$n")" unshare --uts --mount --propagation private /bin/sh -c \
        'hostname "$1" && for d in $2; do [ ! -d "$d" ] || mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs "$d" || exit 1; done &&
         shift 2 && exec "$@"' \
        slurmd-launch "$n" "$shm" "${SLURM_EXEC[@]}" /usr/sbin/slurmd -N "$n" -f "$SLURM_CONF_PATH" 9>&- 2>>"$LOGS/slurmd-$n.stderr" ||
        {
            show_tail "$LOGS/slurmd-$n.stderr" "$LOGS/slurmd-$n.log"
            die "slurmd $n failed to start"
        }
    wait_for "slurmd $n pid file" 20 slurmd_running "$n" || {
        show_tail "$LOGS/slurmd-$n.stderr" "$LOGS/slurmd-$n.log"
        die "slurmd $n did not stay up"
    }
}

# kill -9 a node: its slurmd and everything else in its namespace (job steps).
slurmd_kill() {
    local n="$1"
    netns_kill_all "$n"
    rm -f "$(slurmd_pidfile "$n")"
}

# slurmd_down NODE...: stop the slurmds together, then whatever is left in their namespaces.
# slurmd_start_all NODE...: 16 at a time, so hundreds of nodes register in seconds.
slurmd_start_all() {
    local n p pids=() failed=0
    for n in "$@"; do
        slurmd_start "$n" &
        pids+=("$!")
        ((${#pids[@]} < 16)) && continue
        for p in "${pids[@]}"; do wait "$p" || failed=1; done
        pids=()
    done
    for p in "${pids[@]}"; do wait "$p" || failed=1; done
    ((failed == 0)) || die "a slurmd did not start (logs under $LOGS)"
}

slurmd_down() {
    local n specs=()
    for n in "$@"; do specs+=("slurmd $n=$(slurmd_pidfile "$n")"); done
    stop_pidfiles 10 "${specs[@]}"
    for n in "$@"; do netns_kill_all "$n"; done
}

# ---------------------------------------------------------------- slurmrestd
# The REST API on loopback, JWT only (rest_auth/jwt): every request carries X-SLURM-USER-NAME and
# X-SLURM-USER-TOKEN, and slurmctld (AuthAltTypes=auth/jwt) acts as that user. SLURM_JWT=daemon
# makes slurmrestd pass the caller's token on to slurmctld instead of authenticating with munge.
# It refuses to run as root/SlurmUser, hence -u/-g $RESTD_USER. It listens on the TCP port (tests
# and curl) and on $RESTD_SOCKET, which clusterd uses (in a directory only it and root enter).
# Only openapi/v0.0.38 (22.05; openapi/slurmctld from 23.11 on) is loaded: the slurmdbd plugins
# (dbv0.0.x, openapi/slurmdbd) need an accounting daemon this stack does not run.
slurmrestd_running() { pid_alive "$RUN/slurmrestd.pid"; }

slurmrestd_up() {
    if slurmrestd_running; then
        if ((${SLURM_CONFIG_CHANGED:-0})); then
            stop_pidfile slurmrestd "$RUN/slurmrestd.pid" 10
        else
            return 0
        fi
    fi
    log "starting slurmrestd on $RESTD_LISTEN and $RESTD_SOCKET (JWT)"
    # slurmrestd binds its unix socket after dropping to $RESTD_USER (whose uid is the chroot's own
    # under lib/chroot.sh): the directory is that user's alone, and root's (clusterd's).
    local restd_uid
    restd_uid="$("${SLURM_EXEC[@]}" id -u "$RESTD_USER")"
    install -d -m 0700 -o "$restd_uid" -g 0 "$(dirname "$RESTD_SOCKET")"
    rm -f "$RESTD_SOCKET"
    (
        export SLURM_JWT=daemon SLURM_CONF="$SLURM_CONF_PATH"
        setsid "${SLURM_EXEC[@]}" /usr/sbin/slurmrestd -f "$SLURM_CONF_PATH" -a rest_auth/jwt -s "$RESTD_PLUGINS" \
            -u "$RESTD_USER" -g "$RESTD_USER" "$RESTD_LISTEN" "unix:$RESTD_SOCKET" \
            </dev/null >>"$LOGS/slurmrestd.log" 2>&1 9>&- &
        echo $! >"$RUN/slurmrestd.pid"
    )
    local host="${RESTD_LISTEN%:*}" port="${RESTD_LISTEN##*:}"
    if ! wait_for "slurmrestd on $RESTD_LISTEN" 20 tcp_open "$host" "$port" ||
        ! wait_for "slurmrestd on $RESTD_SOCKET" 10 test -S "$RESTD_SOCKET" || ! slurmrestd_running; then
        show_tail "$LOGS/slurmrestd.log"
        die "slurmrestd did not start (log: $LOGS/slurmrestd.log; is $RESTD_LISTEN taken?)"
    fi
}

slurmrestd_down() { stop_pidfile slurmrestd "$RUN/slurmrestd.pid" 10; }

# ---------------------------------------------------------------- node states
# node_state N -> Slurm's long state string in lower case, e.g. "idle", "down*", "mixed".
node_state() { sinfo -h -N -n "$1" -o '%T' 2>/dev/null | head -n1; }

node_usable() {
    local s
    s="$(node_state "$1")"
    case "$s" in
    idle | mixed | allocated | completing) return 0 ;;
    *) return 1 ;;
    esac
}

# wait_nodes_usable TIMEOUT NODE...: resume DOWN/INVAL/DRAIN nodes until all are usable.
wait_nodes_usable() {
    local timeout="$1" deadline n s pending
    shift
    deadline=$((SECONDS + timeout))
    local -A state
    while :; do
        pending=()
        state=()
        while read -r n s; do state[$n]="$s"; done < <(sinfo -h -N -o '%N %T' 2>/dev/null) # one call for all nodes
        for n in "$@"; do
            s="${state[$n]:-}"
            case "$s" in
            idle | mixed | allocated | completing) continue ;;
            esac
            pending+=("$n")
            case "$s" in
            down* | drain* | inval* | fail* | *drain*)
                scontrol update nodename="$n" state=resume >/dev/null 2>&1 || true
                ;;
            esac
        done
        ((${#pending[@]} == 0)) && return 0
        if ((SECONDS >= deadline)); then
            warn "nodes not usable after ${timeout}s: ${pending[*]}"
            sinfo -N -l >&2 || true
            for n in "${pending[@]}"; do
                scontrol show node "$n" >&2 || true
                show_tail "$LOGS/slurmd-$n.log"
            done
            show_tail "$LOGS/slurmctld.log"
            return 1
        fi
        sleep 1
    done
}
