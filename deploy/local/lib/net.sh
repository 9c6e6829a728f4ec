# shellcheck shell=bash
# Bridge + one network namespace per Slurm node.
#
# Layout (PREFIX is a private /24 chosen once and remembered in $STATE/subnet):
#   bridge $BRIDGE        PREFIX.1/24   (root namespace: slurmctld, SeaweedFS)
#   netns nodeN, eth0     PREFIX.(10+N)/24, veth peer "ccv-nodeN" enslaved to the bridge
# Nothing is routed or NATed: the namespaces reach only the bridge subnet.

SUBNET_CANDIDATES=(10.77.0 10.78.0 10.79.0 172.30.77 192.168.177)

ip_to_int() {
    local a b c d
    IFS=. read -r a b c d <<<"$1"
    echo $(((a << 24) | (b << 16) | (c << 8) | d))
}

# subnet_clashes PREFIX -> 0 when PREFIX.0/24 overlaps a route not owned by our bridge.
subnet_clashes() {
    local prefix="$1" lo hi dst dev net len nlo nhi
    lo=$(ip_to_int "$prefix.0")
    hi=$((lo + 255))
    while read -r dst _ dev _; do
        [[ "$dst" == default ]] && continue
        [[ "$dev" == "$BRIDGE" ]] && continue
        net="${dst%/*}"
        len=32
        [[ "$dst" == */* ]] && len="${dst#*/}"
        [[ "$net" =~ ^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$ ]] || continue
        nlo=$(ip_to_int "$net")
        nlo=$((nlo & ~((1 << (32 - len)) - 1) & 0xffffffff))
        nhi=$((nlo + (1 << (32 - len)) - 1))
        if ((nlo <= hi && lo <= nhi)); then
            return 0
        fi
    done < <(ip -4 route show table all 2>/dev/null | awk '{d=""; for(i=1;i<=NF;i++) if($i=="dev"){d=$(i+1)}; if($1=="local"||$1=="broadcast"){print $2, "x", d, "x"} else {print $1, "x", d, "x"}}')
    return 1
}

choose_subnet() {
    local f="$STATE/subnet" p
    if [[ -n "${CLUSTERCTL_STACK_SUBNET:-}" ]]; then
        SUBNET_PREFIX="$CLUSTERCTL_STACK_SUBNET"
    elif [[ -s "$f" ]] && ! subnet_clashes "$(<"$f")"; then
        SUBNET_PREFIX="$(<"$f")"
    else
        SUBNET_PREFIX=""
        for p in "${SUBNET_CANDIDATES[@]}"; do
            if ! subnet_clashes "$p"; then
                SUBNET_PREFIX="$p"
                break
            fi
        done
        [[ -n "$SUBNET_PREFIX" ]] || die "no free private /24 among ${SUBNET_CANDIDATES[*]}; set CLUSTERCTL_STACK_SUBNET=a.b.c"
    fi
    echo "$SUBNET_PREFIX" >"$f"
    BRIDGE_ADDR="$SUBNET_PREFIX.1"
}

# Read the remembered subnet without probing (for status/down/kill-node).
load_subnet() {
    if [[ -s "$STATE/subnet" ]]; then
        SUBNET_PREFIX="$(<"$STATE/subnet")"
        BRIDGE_ADDR="$SUBNET_PREFIX.1"
    else
        SUBNET_PREFIX=""
        BRIDGE_ADDR=""
    fi
}

node_index() { echo "${1#node}"; }
node_addr() { echo "$SUBNET_PREFIX.$((10 + $(node_index "$1")))"; }
node_veth() { echo "ccv-$1"; }

netns_exists() { ip netns list 2>/dev/null | awk '{print $1}' | grep -qx "$1"; }

net_up() {
    choose_subnet
    if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
        log "creating bridge $BRIDGE ($BRIDGE_ADDR/24)"
        ip link add "$BRIDGE" type bridge
    fi
    if ! ip -4 addr show dev "$BRIDGE" | grep -q "inet $BRIDGE_ADDR/24"; then
        ip -4 addr flush dev "$BRIDGE"
        ip addr add "$BRIDGE_ADDR/24" dev "$BRIDGE"
    fi
    ip link set "$BRIDGE" up
    local n veth addr
    for n in "${NODES[@]}"; do
        veth="$(node_veth "$n")"
        addr="$(node_addr "$n")"
        netns_exists "$n" || ip netns add "$n"
        ip -n "$n" link set lo up
        if ! ip -n "$n" link show eth0 >/dev/null 2>&1; then
            ip link del "$veth" >/dev/null 2>&1 || true
            ip link add "$veth" type veth peer name "$veth-p"
            ip link set "$veth-p" netns "$n"
            ip -n "$n" link set "$veth-p" name eth0
        fi
        ip link set "$veth" master "$BRIDGE"
        ip link set "$veth" up
        if ! ip -n "$n" -4 addr show dev eth0 | grep -q "inet $addr/24"; then
            ip -n "$n" -4 addr flush dev eth0
            ip -n "$n" addr add "$addr/24" dev eth0
        fi
        ip -n "$n" link set eth0 up
    done
    local deadline=$((SECONDS + 15))
    # The bridge forwards only once a port leaves the "listening" state (no STP: immediate,
    # but the first ping can still be lost). Make sure every namespace reaches the bridge.
    command -v ping >/dev/null 2>&1 || return 0
    for n in "${NODES[@]}"; do
        until ip netns exec "$n" ping -c1 -W1 "$BRIDGE_ADDR" >/dev/null 2>&1; do
            ((SECONDS < deadline)) || die "namespace $n cannot reach $BRIDGE_ADDR over $BRIDGE"
            sleep 0.2
        done
    done
}

# Kill every process left in a namespace (job steps, stray slurmd).
netns_kill_all() {
    local n="$1" pids
    netns_exists "$n" || return 0
    pids="$(ip netns pids "$n" 2>/dev/null | tr '\n' ' ')"
    if [[ -n "${pids// /}" ]]; then
        # shellcheck disable=SC2086
        kill -KILL $pids 2>/dev/null || true
        local i
        for ((i = 0; i < 50; i++)); do
            [[ -z "$(ip netns pids "$n" 2>/dev/null)" ]] && break
            sleep 0.1
        done
    fi
}

net_down() {
    local n
    for n in "${NODES[@]}"; do
        netns_kill_all "$n"
        ip link del "$(node_veth "$n")" >/dev/null 2>&1 || true
        if netns_exists "$n"; then
            ip netns del "$n" || warn "could not delete namespace $n"
        fi
    done
    if ip link show "$BRIDGE" >/dev/null 2>&1; then
        ip link del "$BRIDGE" || warn "could not delete bridge $BRIDGE"
    fi
}
