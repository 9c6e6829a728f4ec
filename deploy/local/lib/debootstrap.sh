# shellcheck shell=bash
# Debian chroots built by debootstrap, cached under $CHROOT_CACHE and built only when missing: the
# newer Slurm releases (lib/chroot.sh) and the Ceph S3 gateway (lib/ceph.sh) run from them. debootstrap
# itself comes from its .deb (apt-get download), so nothing is installed on the host.

CHROOT_CACHE="${CLUSTERCTL_CHROOT_CACHE:-/var/cache/clusterctl}"

# The host's own Debian mirror (apt sources), so the chroot comes from where the host's packages do.
host_debian_mirror() {
    local uri
    if [[ -n "${CLUSTERCTL_DEBIAN_MIRROR:-}" ]]; then
        echo "$CLUSTERCTL_DEBIAN_MIRROR"
        return 0
    fi
    uri="$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '/^URIs:/ {for (i = 2; i <= NF; i++) print $i}' |
        grep -E '/debian/?$' | head -n1)"
    [[ -n "$uri" ]] || uri="$(awk '$1 == "deb" && $2 ~ /\/debian\/?$/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null)"
    [[ -n "$uri" ]] || die "no Debian mirror in the host's apt sources: set CLUSTERCTL_DEBIAN_MIRROR"
    echo "${uri%/}"
}

# debootstrap from its .deb, unpacked beside the cache: runs without being installed on the host.
# Under a lock: scripts/test.sh builds the Slurm and Ceph chroots at the same time on a new machine.
debootstrap_dir() {
    local tools="$CHROOT_CACHE/tools"
    mkdir -p "$tools"
    (
        flock -w 300 8 || die "another debootstrap fetch holds $tools/.lock"
        if [[ ! -x "$tools/debootstrap/usr/sbin/debootstrap" ]]; then
            log "fetching debootstrap (apt-get download, unpacked under $tools)"
            (cd "$tools" && rm -f debootstrap_*.deb && apt-get download debootstrap >/dev/null 2>&1) ||
                { apt-get update -qq && (cd "$tools" && apt-get download debootstrap >/dev/null); } ||
                die "apt-get download debootstrap failed"
            dpkg-deb -x "$tools"/debootstrap_*.deb "$tools/debootstrap"
        fi
    ) 8>"$tools/.lock" || exit 1
    echo "$tools/debootstrap"
}

# mounts_under DIR -> mount points at or below DIR, deepest first.
mounts_under() {
    awk -v d="$1" '$2 == d || index($2, d "/") == 1 {print $2}' /proc/mounts | sort -r
}

# in_chroot DIR CMD...: CMD inside the chroot DIR with a clean environment.
in_chroot() {
    local dir="$1"
    shift
    chroot "$dir" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 HOME=/root "$@"
}

mount_chroot_proc() { mountpoint -q "$1/proc" || mount -t proc proc "$1/proc"; }

# debootstrap_chroot DIR SUITE NAME PACKAGES...: DIR holds a minbase SUITE with PACKAGES installed
# (logs: $CHROOT_CACHE/{debootstrap,apt}-NAME.log). Package scripts never start daemons there.
debootstrap_chroot() {
    local dir="$1" suite="$2" name="$3" tmp="$1.tmp" dd missing=() p t0=$SECONDS
    shift 3
    if [[ ! -x "$dir/usr/bin/apt-get" ]]; then
        dd="$(debootstrap_dir)"
        [[ -z "$(mounts_under "$tmp")" ]] || die "$tmp has mounts; unmount them before rebuilding"
        rm -rf --one-file-system "$tmp"
        mkdir -p "$CHROOT_CACHE"
        log "debootstrap --variant=minbase $suite into $dir (once; ~40 s)"
        DEBOOTSTRAP_DIR="$dd/usr/share/debootstrap" "$dd/usr/sbin/debootstrap" --variant=minbase \
            --keyring=/usr/share/keyrings/debian-archive-keyring.gpg "$suite" "$tmp" "$(host_debian_mirror)" \
            >"$CHROOT_CACHE/debootstrap-$name.log" 2>&1 ||
            { show_tail "$CHROOT_CACHE/debootstrap-$name.log" "$tmp/debootstrap/debootstrap.log"; die "debootstrap failed"; }
        mv "$tmp" "$dir"
    fi
    printf '#!/bin/sh\nexit 101\n' >"$dir/usr/sbin/policy-rc.d"
    chmod 755 "$dir/usr/sbin/policy-rc.d"
    cp -fL /etc/resolv.conf "$dir/etc/resolv.conf" 2>/dev/null || true # apt inside resolves names
    for p in "$@"; do
        chroot "$dir" dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    if ((${#missing[@]})); then
        log "apt-get install in the $suite chroot: ${missing[*]}"
        mount_chroot_proc "$dir"
        {
            in_chroot "$dir" DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" ||
                { in_chroot "$dir" apt-get update -q && in_chroot "$dir" DEBIAN_FRONTEND=noninteractive apt-get install \
                    -y -q --no-install-recommends "${missing[@]}"; }
        } >"$CHROOT_CACHE/apt-$name.log" 2>&1 || { show_tail "$CHROOT_CACHE/apt-$name.log"; die "apt-get install in $dir failed"; }
        log "chroot $dir ready in $((SECONDS - t0))s"
    fi
}
