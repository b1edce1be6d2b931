#!/bin/sh
# Prepares a PostgreSQL member before the server starts (the database pod's init container).
#
# 1. Reads the member's ordinal from the pod name and its role from the pod label
#    database.example.com/role, which the operator sets (waits for it a little while).
# 2. On a replica whose data directory is empty, copies the primary with pg_basebackup
#    (streaming the WAL it needs) and writes standby.signal and primary_conninfo
#    (--write-recovery-conf), so the server starts as a hot standby streaming from the primary.
#
# A data directory that is not empty but holds no cluster is never removed: the script stops
# and asks for a person to look at the volume.
#
# Environment: POD_NAME, PRIMARY_HOST, PGDATA, PGPASSWORD.
set -eu

PODINFO_LABELS=${PODINFO_LABELS:-/etc/podinfo/labels}
ROLE_WAIT_SECONDS=${ROLE_WAIT_SECONDS:-60}

log() {
    printf '%s init %s: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "${POD_NAME:-?}" "$*" >&2
}

fail() {
    log "$*"
    exit 1
}

: "${POD_NAME:?POD_NAME must be set}"
: "${PRIMARY_HOST:?PRIMARY_HOST must be set}"
: "${PGDATA:?PGDATA must be set}"
: "${PGPASSWORD:?PGPASSWORD must be set}"

ordinal=${POD_NAME##*-}
case $ordinal in
    '' | *[!0-9]*) fail "cannot read an ordinal from the pod name $POD_NAME" ;;
esac

has_data() {
    [ -s "$PGDATA/PG_VERSION" ]
}

# The role label as the downward API writes it: database.example.com/role="primary".
label_role() {
    if [ -r "$PODINFO_LABELS" ]; then
        sed -n 's/^database\.example\.com\/role="\([a-z]*\)"$/\1/p' "$PODINFO_LABELS"
    fi
}

member_role() {
    waited=0
    while :; do
        role=$(label_role)
        case $role in
            primary | replica)
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

role=$(member_role)
log "ordinal $ordinal, role $role"

if has_data; then
    log "data directory present: nothing to seed"
    exit 0
fi
if [ -d "$PGDATA" ] && [ -n "$(ls -A "$PGDATA")" ]; then
    fail "$PGDATA is not empty but holds no PostgreSQL cluster; refusing to touch it, inspect the volume"
fi
if [ "$role" = primary ]; then
    log "primary with an empty data directory: the server initializes it"
    exit 0
fi

log "empty data directory: copying the primary $PRIMARY_HOST with pg_basebackup"
seed="$PGDATA.seed"
rm -rf "$seed"
pg_basebackup --host="$PRIMARY_HOST" --port=5432 --username=postgres --no-password \
    --pgdata="$seed" --write-recovery-conf --wal-method=stream --checkpoint=fast
chmod 0700 "$seed"
if [ -d "$PGDATA" ]; then
    rmdir "$PGDATA"
fi
# The copy is complete: make it the data directory in one rename.
mv "$seed" "$PGDATA"
log "copy complete: the server starts as a hot standby of $PRIMARY_HOST"
