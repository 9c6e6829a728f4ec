# shellcheck shell=bash disable=SC2034  # settings used by the sibling files
# Another Slurm release beside the host's 22.05: Debian trixie's 24.11 or sid's 26.05, installed by
# debootstrap into a chroot (cached in $CHROOT, built only when missing) and run as a second
# cluster with its own state dir, bridge, namespaces and ports. Sourced by stack.sh after the other
# lib files when `--slurm` names one of these releases: it overrides their settings and the few
# functions that differ. Nothing here touches the host's Slurm, munge or /etc/slurm.
#
# How the pieces meet:
#   daemons   slurmctld, slurmd (in node namespaces) and slurmrestd run inside the chroot
#             (`chroot $CHROOT env PATH=...`); munge is this stack's own munged, also in the chroot,
#             on a socket under $STATE (AuthInfo=socket=...).
#   commands  $STATE/bin holds wrappers that run the chroot's sbatch/squeue/... from the host with
#             the chroot's dynamic loader and libraries: no chroot(2), so they work for any uid
#             (clusterd runs sbatch as the caller through setpriv) and see the host's files.
#   paths     $STATE, /home and /tmp are bind-mounted at the same paths inside the chroot, and the
#             chroot holds a symlink $CHROOT -> /, so every path in slurm.conf (PluginDir under
#             $CHROOT, the state dir, the munge socket) means the same file on both sides.
#   jobs      run inside the chroot: $STATE/jobenv is a venv of the chroot's python3 with this
#             repository installed (pip, with the host's CA bundle), S3 is this stack's SeaweedFS.

case "$SLURM_VERSION" in
24.11) CHROOT_SUITE=trixie CHROOT_TAG=2411 PORT_SHIFT=10000 WEED_SHIFT=100 ;;
26.05) CHROOT_SUITE=sid CHROOT_TAG=2605 PORT_SHIFT=20000 WEED_SHIFT=200 ;;
*) die "no chroot recipe for Slurm $SLURM_VERSION (known: 24.11, 26.05)" ;;
esac

# What only the newer release has (slurm.conf(5) of 26.05): requeue_delay replaces the ~120 s
# cred_expire wait of a requeued job, and jobs may ask for an expedited requeue
# (sbatch --requeue=expedite); clusterd detects both at start and `clusterd check` reports them.
CHROOT_CONF_LINES=""
if [[ "$SLURM_VERSION" == 26.05 ]]; then
    SCHED_PARAMS="$SCHED_PARAMS,requeue_delay=5"
    CHROOT_CONF_LINES="SlurmctldParameters=enable_expedited_requeue"
fi

CHROOT="$CHROOT_CACHE/slurm-$SLURM_VERSION"
CHROOT_PACKAGES=(slurmctld slurmd slurm-client slurmrestd slurm-wlm-jwt-plugin munge python3 python3-venv ca-certificates)
CHROOT_PATH=/usr/sbin:/usr/bin:/sbin:/bin
CHROOT_CA=/etc/clusterctl-host-ca.crt # the host's CA bundle, for pip inside the chroot
CHROOT_BINDS=("$STATE" /home /tmp)    # bind-mounted at the same path inside the chroot
SLURM_COMMANDS=(sbatch squeue sinfo scontrol scancel srun salloc sacct sdiag sprio sshare sattach sbcast strigger)

# Names and ports of this stack: nothing clashes with the 22.05 stack or the other release.
BRIDGE="ccbr$CHROOT_TAG"
NETNS_PREFIX="s$CHROOT_TAG-" # netns s2411-node1; Slurm's node names stay node1..node6
VETH_PREFIX="c$CHROOT_TAG-"
SUBNET_CANDIDATES=("10.77.${CHROOT_TAG:0:2}" "10.78.${CHROOT_TAG:0:2}" "172.30.${CHROOT_TAG:0:2}" "192.168.${CHROOT_TAG:0:2}")
SLURMCTLD_PORT=$((6817 + PORT_SHIFT))
SLURMD_PORT=$((6818 + PORT_SHIFT))
RESTD_LISTEN="127.0.0.1:$((6820 + PORT_SHIFT))"
RESTD_PLUGINS=openapi/slurmctld # 23.11+: one plugin serves every data_parser version the release has
S3_PORT=$((8333 + WEED_SHIFT))
WEED_MASTER_PORT=$((19333 + WEED_SHIFT))
WEED_VOLUME_PORT=$((18080 + WEED_SHIFT))
WEED_FILER_PORT=$((18888 + WEED_SHIFT))
CLUSTERD_METRICS_LISTEN="127.0.0.1:$((9464 + WEED_SHIFT))"
CLUSTERD_WEB_LISTEN="127.0.0.1:$((880 + WEED_SHIFT / 10))" # below 1024, as the dashboard needs

SLURM_ETC="$STATE/etc"
SLURM_CONF_PATH="$SLURM_ETC/slurm.conf"
SLURM_BIN="$STATE/bin"
PATH="$SLURM_BIN:$PATH" # scontrol/sinfo in the shared functions are this release's
MUNGE_DIR="$STATE/munge"
MUNGE_SOCKET="$MUNGE_DIR/munge.socket.2"
SLURM_EXEC=(chroot "$CHROOT" /usr/bin/env "PATH=$CHROOT_PATH")

# rename_fn OLD NEW: keep a sibling file's function under another name before overriding it.
rename_fn() {
    local body
    body="$(declare -f "$1")"
    eval "${body/#$1/$2}"
}

chroot_run() { chroot "$CHROOT" /usr/bin/env -i "PATH=$CHROOT_PATH" LANG=C.UTF-8 HOME=/root "$@"; }

# ---------------------------------------------------------------- building the chroot
chroot_build() {
    debootstrap_chroot "$CHROOT" "$CHROOT_SUITE" "$SLURM_VERSION" "${CHROOT_PACKAGES[@]}"
    cp -f /etc/ssl/certs/ca-certificates.crt "$CHROOT$CHROOT_CA"
    # $CHROOT inside the chroot is the chroot itself: host paths under it resolve on both sides.
    mkdir -p "$CHROOT$(dirname "$CHROOT")"
    [[ -L "$CHROOT$CHROOT" ]] || ln -sfn / "$CHROOT$CHROOT"
}

# The chroot's multiarch library dir (where libslurmfull.so and the plugins live).
chroot_libdir() {
    local d
    d="$(ls -d "$CHROOT"/usr/lib/*-linux-gnu/slurm-wlm 2>/dev/null | head -n1)"
    [[ -n "$d" ]] || die "no slurm-wlm library dir in $CHROOT"
    dirname "$d"
}

chroot_mount() {
    local d
    mount_chroot_proc "$CHROOT"
    for d in dev sys; do
        if ! mountpoint -q "$CHROOT/$d"; then
            mount --rbind "/$d" "$CHROOT/$d"
            mount --make-rslave "$CHROOT/$d"
        fi
    done
    for d in "${CHROOT_BINDS[@]}"; do
        mkdir -p "$CHROOT$d"
        mountpoint -q "$CHROOT$d" || mount --bind "$d" "$CHROOT$d"
    done
}

chroot_umount() {
    local m
    [[ -d "$CHROOT" ]] || return 0
    while read -r m; do
        [[ -n "$m" ]] || continue
        umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || warn "could not unmount $m"
    done < <(mounts_under "$CHROOT")
}

# alice and bob with the host's uids/gids (jobs run as them inside); slurmrestd's own user.
chroot_sync_users() {
    local u line gline gid
    for u in "${JOB_USERS[@]}"; do
        line="$(getent passwd "$u")"
        gid="$(cut -d: -f4 <<<"$line")"
        gline="$(getent group "$gid")"
        if [[ "$(chroot "$CHROOT" getent passwd "$u")" != "$line" ]]; then
            sed -i "/^$u:/d" "$CHROOT/etc/passwd"
            echo "$line" >>"$CHROOT/etc/passwd"
        fi
        if [[ "$(chroot "$CHROOT" getent group "$gid" | cut -d: -f1-3)" != "$(cut -d: -f1-3 <<<"$gline")" ]]; then
            sed -i "/^${gline%%:*}:/d" "$CHROOT/etc/group"
            echo "${gline%%:*}:x:$gid:" >>"$CHROOT/etc/group"
        fi
    done
    # The group that may reach clusterd's socket, with the same gid and members: the jobs' ranks
    # (inside the chroot) send their heartbeats there.
    gline="$(getent group "$CLUSTERD_SOCKET_GROUP")"
    if [[ -n "$gline" && "$(chroot "$CHROOT" getent group "$CLUSTERD_SOCKET_GROUP")" != "$gline" ]]; then
        sed -i "/^$CLUSTERD_SOCKET_GROUP:/d" "$CHROOT/etc/group"
        echo "$gline" >>"$CHROOT/etc/group"
    fi
    chroot "$CHROOT" getent passwd "$RESTD_USER" >/dev/null ||
        chroot_run useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin "$RESTD_USER"
}

# One wrapper per command: the chroot's binary through the chroot's loader and libraries.
chroot_write_wrappers() {
    local lib c tmp
    lib="$(chroot_libdir)"
    mkdir -p "$SLURM_BIN"
    for c in "${SLURM_COMMANDS[@]}"; do
        [[ -x "$CHROOT/usr/bin/$c" ]] || continue
        tmp="$SLURM_BIN/.$c.tmp"
        cat >"$tmp" <<EOF
#!/bin/sh
# generated by clusterctl deploy/local/stack.sh: Slurm $SLURM_VERSION's $c from $CHROOT, for any uid
# (the chroot's loader and libraries, no chroot(2)); SLURM_CONF defaults to this stack's.
SLURM_CONF="\${SLURM_CONF:-$SLURM_CONF_PATH}"
export SLURM_CONF
exec $lib/ld-linux-x86-64.so.2 --library-path $lib/slurm-wlm:$lib --argv0 $c $CHROOT/usr/bin/$c "\$@"
EOF
        chmod 755 "$tmp"
        mv -f "$tmp" "$SLURM_BIN/$c"
    done
}

# ---------------------------------------------------------------- overrides
rename_fn install_packages host_install_packages
install_packages() {
    APT_PACKAGES=(iproute2 openssl procps iputils-ping curl util-linux coreutils)
    host_install_packages
    chroot_build
}

rename_fn ensure_state_dirs host_ensure_state_dirs
ensure_state_dirs() {
    host_ensure_state_dirs
    echo "$SLURM_VERSION" >"$STATE/slurm-version"
    mkdir -p "$SLURM_ETC"
    chroot_mount
    chroot_sync_users
    chroot_write_wrappers
}

rename_fn write_netns_hosts host_write_netns_hosts
write_netns_hosts() {
    host_write_netns_hosts
    # Processes in the chroot read its /etc/hosts, not /etc/netns/*: the same table for every node.
    cp "/etc/netns/$(node_ns "${NODES[0]}")/hosts" "$CHROOT/etc/hosts"
}

munge_works() {
    chroot_run munge -n -S "$MUNGE_SOCKET" 2>/dev/null | chroot_run unmunge -S "$MUNGE_SOCKET" >/dev/null 2>&1
}

munge_up() {
    local uid
    uid="$(chroot "$CHROOT" id -u munge)" || die "no munge user in $CHROOT"
    mkdir -p "$MUNGE_DIR"
    if [[ ! -s "$MUNGE_DIR/munge.key" ]]; then
        log "creating this stack's munge key"
        dd if=/dev/urandom of="$MUNGE_DIR/munge.key" bs=1 count=1024 status=none
    fi
    chown -R "$uid:$uid" "$MUNGE_DIR"
    chmod 755 "$MUNGE_DIR"
    chmod 400 "$MUNGE_DIR/munge.key"
    munge_works && return 0
    log "starting munged (socket $MUNGE_SOCKET)"
    rm -f "$MUNGE_DIR/munged.pid"
    chroot --userspec="$uid:$uid" "$CHROOT" /usr/bin/env -i "PATH=$CHROOT_PATH" /usr/sbin/munged --force \
        --socket="$MUNGE_SOCKET" --key-file="$MUNGE_DIR/munge.key" --pid-file="$MUNGE_DIR/munged.pid" \
        --log-file="$MUNGE_DIR/munged.log" --seed-file="$MUNGE_DIR/munged.seed" 9>&- 2>>"$LOGS/munged.stderr" ||
        { show_tail "$LOGS/munged.stderr" "$MUNGE_DIR/munged.log"; die "munged failed to start"; }
    wait_for "munged" 20 munge_works || { show_tail "$MUNGE_DIR/munged.log"; die "munge does not answer"; }
}

munge_down() { stop_pidfile munged "$MUNGE_DIR/munged.pid" 10; }

# slurm.conf from the shared template plus what this release needs; cgroup.conf without cgroups.
write_slurm_config() {
    local tpl="$STACK_HOME/templates" tmp f
    mkdir -p "$SLURM_ETC"
    tmp="$(mktemp -d)"
    render "$tpl/slurm.conf" "$tmp/slurm.conf" \
        "CTLD_HOST=$(hostname -s)" "BRIDGE_ADDR=$BRIDGE_ADDR" "STATE=$STATE" \
        "SLURMD_TIMEOUT=$SLURMD_TIMEOUT" "JWT_KEY=$JWT_KEY_FILE" "NODE_LINES=$(node_lines)" \
        "CTLD_PORT=$SLURMCTLD_PORT" "SLURMD_PORT=$SLURMD_PORT" "SCHED_PARAMS=$SCHED_PARAMS"
    cat >>"$tmp/slurm.conf" <<EOF

# Slurm $SLURM_VERSION from the $CHROOT_SUITE chroot $CHROOT (deploy/local/lib/chroot.sh): plugins from
# the chroot (the same path inside it), authentication through this stack's own munged.
PluginDir=$(chroot_libdir)/slurm-wlm
AuthInfo=socket=$MUNGE_SOCKET
$CHROOT_CONF_LINES
EOF
    write_topology "$tmp/topology.conf"
    cp "$tpl/gres.conf" "$tmp/"
    cat >"$tmp/cgroup.conf" <<EOF
$SLURM_MARKER -- see deploy/local/lib/chroot.sh
# The chroot has no cgroup filesystem mounted ("cgroup filesystem not mounted" otherwise).
CgroupPlugin=disabled
EOF
    SLURM_CONFIG_CHANGED=0
    for f in slurm.conf topology.conf gres.conf cgroup.conf; do
        if ! cmp -s "$tmp/$f" "$SLURM_ETC/$f"; then
            SLURM_CONFIG_CHANGED=1
            install -m 644 "$tmp/$f" "$SLURM_ETC/$f"
        fi
    done
    rm -rf "$tmp"
}

remove_slurm_config() { rm -f "$SLURM_ETC"/{slurm,topology,gres,cgroup}.conf; }

# The job environment: a venv of the chroot's python3 at $JOBENV (the same path inside), with a
# copy of this repository installed by the chroot's pip.
jobenv_up() {
    local want stamp src="$STATE/jobenv-src"
    want="$(cd "$REPO_ROOT" && find pyproject.toml client service -name '*.py' -o -name 'pyproject.toml' |
        sort | xargs cat | sha256sum | cut -c1-16)"
    stamp="$JOBENV/.clusterctl-source"
    if [[ -e "$JOBENV" ]] && ! chroot_run "$JOBENV/bin/python" -c '' >/dev/null 2>&1; then
        log "the job environment does not run in the (rebuilt?) chroot: making it again"
        rm -rf --one-file-system "$JOBENV"
    fi
    if [[ ! -x "$JOBENV/bin/python" ]]; then
        log "creating the job Python environment in $JOBENV (the chroot's python3)"
        chroot_run python3 -m venv "$JOBENV" || die "python3 -m venv in $CHROOT failed"
    fi
    if [[ "$(cat "$stamp" 2>/dev/null)" != "$want" ]]; then
        log "installing clusterctl into the job environment (pip in the chroot)"
        rm -rf "$src"
        mkdir -p "$src"
        (cd "$REPO_ROOT" && tar -cf - --exclude=__pycache__ --exclude='*.egg-info' pyproject.toml README.md client service) |
            tar -xf - -C "$src"
        chroot_run PIP_CERT="$CHROOT_CA" PIP_DISABLE_PIP_VERSION_CHECK=1 "$JOBENV/bin/python" -m pip install -q "$src" \
            >"$LOGS/jobenv-pip.log" 2>&1 || { show_tail "$LOGS/jobenv-pip.log"; die "pip install into $JOBENV failed"; }
        rm -rf "$src"
        echo "$want" >"$stamp"
    fi
    mkdir -p "$JOB_EXAMPLES"
    cp "$REPO_ROOT"/examples/*.py "$JOB_EXAMPLES/"
    chmod -R a+rX "$JOBENV" "$JOB_EXAMPLES"
}

rename_fn write_env_file host_write_env_file
write_env_file() {
    host_write_env_file
    cat >>"$ENV_FILE" <<EOF
export CLUSTERCTL_SLURM_VERSION=$SLURM_VERSION
export CLUSTERCTL_SLURM_BIN=$SLURM_BIN
export CLUSTERCTL_CHROOT=$CHROOT
export PATH="$SLURM_BIN:\$PATH"
EOF
}

rename_fn write_clusterd_config host_write_clusterd_config
write_clusterd_config() {
    host_write_clusterd_config
    # [slurm] is the template's last table: Slurm's commands are this release's wrappers.
    printf 'bin_dir = "%s"          # Slurm %s commands (wrappers into %s)\n' "$SLURM_BIN" "$SLURM_VERSION" "$CHROOT" \
        >>"$CLUSTERD_CONFIG"
}
