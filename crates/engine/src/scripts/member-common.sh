#!/bin/sh
# The prelude of every member's init script (the database pod's init container), shared by the
# engines; the engine's part follows and says what the script does. It reads the member's
# ordinal from the pod name, and its role from the pod label database.example.com/role, which
# the operator sets (member_role waits for it a little while); it stops a temporary server left
# running when the script exits, and waits for the primary to answer.
#
# The engine's part defines has_data (the data directory holds the engine's data),
# primary_answers (the primary answers on PORT) and PORT, and sets server_stop_signal when the
# server wants another signal than TERM to stop.
#
# Environment (all engines): POD_NAME, PRIMARY_HOST, REPLICATION_USER, REPLICATION_PASSWORD,
# ADMIN_USER, ADMIN_PASSWORD (the operator's account; both passwords from the operator Secret
# <name>-operator).
set -eu

# Paths as mounted by the StatefulSet (overridable for tests).
PODINFO_LABELS=${PODINFO_LABELS:-/etc/podinfo/labels}
RUN_DIR=${RUN_DIR:-/run/database-operator}
# The cluster's server certificate, key and authorities, when the pod mounts them (spec.tls).
TLS_DIR=${TLS_DIR:-/etc/database-operator-tls}
ROLE_WAIT_SECONDS=${ROLE_WAIT_SECONDS:-60}
PRIMARY_WAIT_SECONDS=${PRIMARY_WAIT_SECONDS:-600}
EMPTY_PRIMARY_WAIT_SECONDS=${EMPTY_PRIMARY_WAIT_SECONDS:-600}

log() {
    printf '%s init %s: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "${POD_NAME:-?}" "$*" >&2
}

fail() {
    log "$*"
    exit 1
}

: "${POD_NAME:?POD_NAME must be set}"
: "${PRIMARY_HOST:?PRIMARY_HOST must be set}"
: "${REPLICATION_USER:?REPLICATION_USER must be set}"
: "${REPLICATION_PASSWORD:?REPLICATION_PASSWORD must be set}"
: "${ADMIN_USER:?ADMIN_USER must be set}"
: "${ADMIN_PASSWORD:?ADMIN_PASSWORD must be set}"

ordinal=${POD_NAME##*-}
case $ordinal in
    '' | *[!0-9]*) fail "cannot read an ordinal from the pod name $POD_NAME" ;;
esac

# The role label as the downward API writes it: database.example.com/role="primary".
label_role() {
    if [ -r "$PODINFO_LABELS" ]; then
        sed -n 's/^database\.example\.com\/role="\([a-z]*\)"$/\1/p' "$PODINFO_LABELS"
    fi
}

# Whether the operator lets this member create a new database: the pod label
# database.example.com/initialize="allowed", which it sets only on the first primary of a cluster
# that has never run. A member of a cluster that has held data never initializes one: an empty
# volume under the primary means the data is elsewhere (the replicas), not that there is none.
may_initialize() {
    [ -r "$PODINFO_LABELS" ] &&
        grep -qx 'database\.example\.com/initialize="allowed"' "$PODINFO_LABELS"
}

# The reseed the operator asks of this member: the value of the pod label
# database.example.com/reseed (a token naming the request), empty when there is none.
reseed_request() {
    if [ -r "$PODINFO_LABELS" ]; then
        sed -n 's/^database\.example\.com\/reseed="\([0-9A-Za-z._-]*\)"$/\1/p' "$PODINFO_LABELS"
    fi
}

# Whether the operator asks this member to discard its data and be seeded again from the
# primary, and this volume has not carried that request out yet: the marker file $1 (on the
# data volume, beside the data directory) records the last request done. Sets reseed_token.
# The operator asks only for a replica that holds nothing the primary lacks and can no longer
# catch up (the primary no longer has the WAL or binary logs it needs), or when a person asks
# (kubectl dbc reseed).
reseed_pending() {
    reseed_token=$(reseed_request)
    [ -n "$reseed_token" ] || return 1
    [ "$(cat "$1" 2>/dev/null)" != "$reseed_token" ]
}

# Records the pending reseed request as carried out in the marker file $1 (once the copy is in
# place: a start that fails before seeds again).
reseed_done() {
    if reseed_pending "$1"; then
        printf '%s\n' "$reseed_token" >"$1.new"
        mv "$1.new" "$1"
        log "reseed $reseed_token done"
    fi
}

# The primary's volume is empty: returns once the operator allows a new database (role stays
# primary), or once it makes this member a replica (sets role=replica: it fails over to a
# member that has the data, and this one is seeded from it), checking every 2 s; fails after
# EMPTY_PRIMARY_WAIT_SECONDS (the container starts again and waits again). Call it in the
# script's own shell (it sets role, and its failure ends the script).
await_empty_primary_role() {
    waited=0
    while :; do
        if may_initialize; then
            return 0
        fi
        if [ "$(label_role)" = replica ]; then
            role=replica
            log "made a replica: seeding this member from the primary"
            return 0
        fi
        if [ "$waited" -eq 0 ]; then
            log "the volume is empty, and this cluster has held data (the operator did not allow a new database): not initializing one; waiting for the operator to make this member a replica of a member that has the data"
        fi
        if [ "$waited" -ge "$EMPTY_PRIMARY_WAIT_SECONDS" ]; then
            fail "still not allowed to initialize and not a replica after ${EMPTY_PRIMARY_WAIT_SECONDS}s; nothing was written"
        fi
        sleep 2
        waited=$((waited + 2))
    done
}

# The member's role: the label's, or, when none came within ROLE_WAIT_SECONDS, primary only for
# ordinal 0 without data (a brand-new cluster), replica otherwise. `quarantined` (set by the
# operator on a member that diverged from the primary) starts the member read-only and not
# replicating, its data untouched.
member_role() {
    waited=0
    while :; do
        role=$(label_role)
        case $role in
            primary | replica | quarantined)
                echo "$role"
                return 0
                ;;
        esac
        if [ "$waited" -ge "$ROLE_WAIT_SECONDS" ]; then
            if [ "$ordinal" -eq 0 ] && ! has_data; then
                echo primary
            else
                echo replica
            fi
            return 0
        fi
        sleep 2
        waited=$((waited + 2))
    done
}

# The temporary server this script started, stopped when the script exits.
server_pid=
server_stop_signal=TERM
stop_server() {
    if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
        kill -s "$server_stop_signal" "$server_pid"
        wait "$server_pid" || true
    fi
    server_pid=
}
trap stop_server EXIT

# Waits until the primary answers (primary_answers, given this function's arguments: MySQL's
# and MariaDB's take a client option file, PostgreSQL's none), at most PRIMARY_WAIT_SECONDS.
# shellcheck disable=SC2120
wait_for_primary() {
    waited=0
    until primary_answers "$@"; do
        if [ "$waited" -ge "$PRIMARY_WAIT_SECONDS" ]; then
            fail "the primary $PRIMARY_HOST:$PORT did not answer for ${PRIMARY_WAIT_SECONDS}s"
        fi
        sleep 2
        waited=$((waited + 2))
    done
}

# Whether this cluster starts from a backup (spec.bootstrap.fromBackup): a new primary restores
# it before it ever serves.
restoring() {
    [ -n "${RESTORE_FROM_CLUSTER:-}" ]
}

# Restores the backup spec.bootstrap.fromBackup names into the temporary server at $1 (a socket
# directory or socket file) as the user $2, for engine $3, downloading the dump under $4 (on the
# data volume, removed afterwards). The operator binary checks the engine, the major release and
# the dump's SHA-256 against the manifest before applying anything.
restore_from_backup() {
    log "restoring backup $RESTORE_BACKUP of $RESTORE_FROM_NAMESPACE/$RESTORE_FROM_CLUSTER from bucket $RESTORE_S3_BUCKET"
    download="$4"
    rm -rf "$download"
    mkdir -p "$download"
    set -- --host="$1" --user="$2" --engine="$3"
    if [ -n "${RESTORE_S3_ENDPOINT:-}" ]; then
        set -- "$@" --endpoint="$RESTORE_S3_ENDPOINT"
    fi
    if [ -n "${RESTORE_AWS_REGION:-}" ]; then
        set -- "$@" --region="$RESTORE_AWS_REGION"
    fi
    # The restore's exit code names its cause (3 credentials refused, 4 bucket unreachable, ...):
    # it is kept, and the operator's RestoreFailed condition says it.
    TMPDIR="$download" "$RESTORE_BINARY" backup restore --namespace="$RESTORE_FROM_NAMESPACE" \
        --cluster="$RESTORE_FROM_CLUSTER" --bucket="$RESTORE_S3_BUCKET" \
        --backup="$RESTORE_BACKUP" "$@" || {
        status=$?
        log "restoring backup $RESTORE_BACKUP of $RESTORE_FROM_NAMESPACE/$RESTORE_FROM_CLUSTER failed (see above; exit $status); the data directory was not created, the next start of this container tries again"
        exit "$status"
    }
    rm -rf "$download"
}
