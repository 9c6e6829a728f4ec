#!/usr/bin/env bash
# Restart a command whenever it exits, as systemd's Restart=always would (executed, not sourced):
#
#   supervise.sh NAME PIDFILE -- COMMAND [ARG...]
#
# Writes COMMAND's pid to PIDFILE at every start, so a fault hook (stack.sh kill-leader) can
# SIGKILL the command and leave this loop to bring it back. TERM, INT or HUP stop the command
# (TERM, then KILL after SUPERVISE_GRACE s, default 15) and then the supervisor. A restart follows
# SUPERVISE_RESTART_SECONDS (0.5) after an exit; while the command keeps dying by itself within 5 s
# of its start (a config it refuses, say), the pause doubles up to 8 s, so a crash loop does not
# spin. A death by signal (kill-leader's SIGKILL) is always followed by the short pause.
set -uo pipefail

if (($# < 4)) || [[ "$3" != -- ]]; then
    sed -n '2,11p' "$0" >&2
    exit 2
fi
name="$1" pidfile="$2"
shift 3
restart="${SUPERVISE_RESTART_SECONDS:-0.5}"
grace="${SUPERVISE_GRACE:-15}"
child=""

say() { printf '%s supervise %s: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$name" "$*" >&2; }

stop() {
    local i
    if [[ -n "$child" ]] && kill -0 "$child" 2>/dev/null; then
        say "stopping pid $child"
        kill -TERM "$child" 2>/dev/null
        kill -CONT "$child" 2>/dev/null # a frozen one (stack.sh freeze-leader) must see the TERM
        for ((i = 0; i < grace * 10; i++)); do
            kill -0 "$child" 2>/dev/null || break
            sleep 0.1
        done
        if kill -0 "$child" 2>/dev/null; then
            say "pid $child still running after ${grace}s: KILL"
            kill -KILL "$child" 2>/dev/null
        fi
    fi
    rm -f "$pidfile"
    exit 0
}
trap stop TERM INT HUP

delay="$restart"
while :; do
    started="$(date +%s)"
    "$@" &
    child=$!
    echo "$child" >"$pidfile"
    say "started pid $child"
    wait "$child"
    rc=$?
    ran=$(($(date +%s) - started))
    if ((rc > 128)); then
        say "pid $child killed by signal $((rc - 128)) after ${ran}s"
    else
        say "pid $child exited with status $rc after ${ran}s"
    fi
    # Ran a while, or killed from outside (kill-leader's SIGKILL): back after the short pause.
    ((rc > 128 || ran >= 5)) && delay="$restart"
    say "restarting in ${delay}s"
    sleep "$delay" &
    wait $! # not a foreground sleep: a TERM now runs stop() at once, not after the pause
    # Died by itself within 5 s: if it dies again so, the next pause is twice as long (8 s at most).
    ((rc <= 128 && ran < 5)) && delay="$(awk -v d="$delay" 'BEGIN { d *= 2; print (d > 8 ? 8 : d) }')"
done
