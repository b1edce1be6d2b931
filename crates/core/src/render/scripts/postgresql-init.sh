
# Prepares a PostgreSQL member before the server starts (the database pod's init container).
# The server container only runs `postgres`: everything an image entrypoint would do happens here,
# so the pod behaves the same with the official image and on a node without its entrypoint.
#
# 1. Reads the member's ordinal from the pod name and its role from the pod label
#    database.example.com/role, which the operator sets (waits for it a little while).
# 2. Writes the replication password file (RUN_DIR/pgpass, read through primary_conninfo's
#    passfile) from the Secret, on every start, so a new password reaches the member.
# 3. On the primary with an empty data directory: initdb (scram-sha-256, the superuser password
#    read from a file, never from the command line), then creates the replication role on a
#    temporary server that listens on a private socket only.
# 4. On a replica with an empty data directory: waits for the primary, copies it with
#    pg_basebackup (streaming the WAL it needs, --write-recovery-conf), so the server starts as a
#    hot standby streaming from the primary.
# 5. On a replica whose data directory holds a former primary (no standby.signal): writes
#    standby.signal, so it starts as a standby of the current primary and never writable. The
#    operator decides whether it can follow or must be rebuilt; this script never promotes and
#    never removes data.
#
# A data directory that is not empty but holds no cluster is never removed: the script stops
# and asks for a person to look at the volume.
#
# Environment: POD_NAME, PRIMARY_HOST, PGDATA, POSTGRES_PASSWORD, REPLICATION_USER,
# REPLICATION_PASSWORD.

PORT=${PORT:-5432}
# A fast shutdown: the temporary server has no clients to wait for.
server_stop_signal=INT

: "${PGDATA:?PGDATA must be set}"
: "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD must be set}"

has_data() {
    [ -s "$PGDATA/PG_VERSION" ]
}

primary_answers() {
    pg_isready --host="$PRIMARY_HOST" --port="$PORT" --quiet
}

# Escapes $1 for a .pgpass field (backslash and colon).
pgpass_field() {
    printf '%s' "$1" | sed -e 's/\\/\\\\/g' -e 's/:/\\:/g'
}

# The password file of the replication connection (pg_basebackup here, primary_conninfo later).
write_pgpass() {
    mkdir -p "$RUN_DIR"
    umask 077
    printf '*:*:*:%s:%s\n' "$(pgpass_field "$REPLICATION_USER")" \
        "$(pgpass_field "$REPLICATION_PASSWORD")" >"$RUN_DIR/pgpass.new"
    mv "$RUN_DIR/pgpass.new" "$RUN_DIR/pgpass"
    umask 022
}

initialize_primary() {
    log "primary with an empty data directory: initializing it"
    # A cluster that starts from a backup is built beside the data directory and renamed into
    # place once restored: an interrupted restore never looks like data.
    target="$PGDATA"
    if restoring; then
        target="$PGDATA.restore"
        rm -rf "$target"
    fi
    work=$(mktemp -d "$RUN_DIR/init.XXXXXX")
    umask 077
    printf '%s\n' "$POSTGRES_PASSWORD" >"$work/pwfile"
    umask 022
    # C collation: sorting never changes under the cluster when the C library is upgraded.
    initdb --pgdata="$target" --username=postgres --pwfile="$work/pwfile" \
        --auth-local=peer --auth-host=scram-sha-256 --encoding=UTF8 --locale=C \
        --data-checksums >"$work/initdb.log" 2>&1 ||
        fail "initdb failed: $(cat "$work/initdb.log")"
    rm -f "$work/pwfile"

    # A temporary server on a private socket and no TCP port creates the replication role.
    # Statements are never logged (the password is in one).
    postgres -D "$target" -c listen_addresses= -c unix_socket_directories="$work" \
        -c log_min_error_statement=panic -c log_statement=none \
        -c password_encryption=scram-sha-256 >"$work/server.log" 2>&1 &
    server_pid=$!
    tries=0
    until pg_isready --host="$work" --port="$PORT" --quiet; do
        tries=$((tries + 1))
        if [ "$tries" -gt 120 ]; then
            fail "the temporary server did not start: $(cat "$work/server.log")"
        fi
        sleep 1
    done
    psql --no-psqlrc --host="$work" --port="$PORT" --username=postgres --dbname=postgres \
        --set=ON_ERROR_STOP=1 --quiet >/dev/null <<'SQL' || fail "could not create the replication role"
\getenv repl_user REPLICATION_USER
\getenv repl_password REPLICATION_PASSWORD
CREATE ROLE :"repl_user" WITH REPLICATION LOGIN PASSWORD :'repl_password';
SQL
    if restoring; then
        restore_from_backup "$work" postgres postgresql "$PGDATA.download"
    fi
    stop_server
    if restoring; then
        chmod 0700 "$target"
        if [ -d "$PGDATA" ]; then
            rmdir "$PGDATA"
        fi
        mv "$target" "$PGDATA"
        log "backup restored into the new data directory"
    fi
    rm -rf "$work"
    log "initialized: superuser postgres and replication role $REPLICATION_USER"
}

seed_from_primary() {
    log "empty data directory: copying the primary $PRIMARY_HOST with pg_basebackup"
    wait_for_primary
    seed="$PGDATA.seed"
    rm -rf "$seed"
    PGPASSFILE="$RUN_DIR/pgpass" pg_basebackup --host="$PRIMARY_HOST" --port="$PORT" \
        --username="$REPLICATION_USER" --no-password --pgdata="$seed" --write-recovery-conf \
        --wal-method=stream --checkpoint=fast
    chmod 0700 "$seed"
    if [ -d "$PGDATA" ]; then
        rmdir "$PGDATA"
    fi
    # The copy is complete: make it the data directory in one rename.
    mv "$seed" "$PGDATA"
    log "copy complete: the server starts as a hot standby of $PRIMARY_HOST"
}

role=$(member_role)
log "ordinal $ordinal, role $role"
write_pgpass

if has_data; then
    # The server refuses a data directory its group may write; a volume's fsGroup handling (or
    # a restore by hand) can leave it so. As the official image's entrypoint does, fix it.
    chmod 0700 "$PGDATA"
    if [ "$role" = replica ] && [ ! -e "$PGDATA/standby.signal" ]; then
        # A former primary (or a member that lost its label): never start it writable.
        : >"$PGDATA/standby.signal"
        log "data directory of a former primary and the role is replica: starting it as a standby, not writable"
    else
        log "data directory present: nothing to seed"
    fi
    exit 0
fi
if [ -d "$PGDATA" ] && [ -n "$(ls -A "$PGDATA")" ]; then
    fail "$PGDATA is not empty but holds no PostgreSQL cluster; refusing to touch it, inspect the volume"
fi
if [ "$role" = primary ]; then
    initialize_primary
else
    seed_from_primary
fi
