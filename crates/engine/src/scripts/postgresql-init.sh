# Prepares a PostgreSQL member before the server starts (the database pod's init container).
# The server container only runs `postgres`: everything an image entrypoint would do happens here,
# so the pod behaves the same with the official image and on a node without its entrypoint.
#
# 1. Reads the member's ordinal from the pod name and its role from the pod label
#    database.example.com/role, which the operator sets (waits for it a little while).
# 2. Writes the replication password file (RUN_DIR/pgpass, read through primary_conninfo's
#    passfile) from the Secret, on every start, so a new password reaches the member.
# 3. On the primary with an empty data directory, when the operator allows it (the first primary
#    of a cluster that has never run; otherwise it waits to become a replica, step 4): initdb
#    (scram-sha-256, data checksums, the superuser password read from a file, never from the
#    command line), then creates the replication role and the operator's role ADMIN_USER
#    (SUPERUSER LOGIN) on a temporary server that listens on a private socket only. Replicas
#    get both with the copy. A cluster that starts from a backup (spec.bootstrap.fromBackup)
#    restores a logical one into that temporary server; a physical one is unpacked instead and
#    recovered from the source's WAL archive to the target, then gets this cluster's passwords
#    (restore_physical).
# 4. On a replica with an empty data directory: waits for the primary, copies it with
#    pg_basebackup (streaming the WAL it needs, --write-recovery-conf), so the server starts as a
#    hot standby streaming from the primary.
# 5. On a replica whose data directory holds a former primary (no standby.signal): rewinds it
#    to the current primary's history with pg_rewind (as ADMIN_USER, the password in a file in
#    RUN_DIR; after single-user crash recovery when it was not shut down cleanly), points
#    primary_conninfo at PRIMARY_HOST and writes standby.signal, so it starts as a standby of
#    the current primary and never writable. When the rewind cannot run or fails, the data is
#    left as it was and the member still starts as a standby (it will not stream; the operator
#    sees it and decides). This script never promotes, and removes data only when the operator
#    asks for a reseed (step 8).
# 5b. On a standby restarting as a replica after a clean shutdown whose timeline is not the
#    primary's: the same rewind (a dry run first; "no rewind required" changes nothing). A
#    standby that received WAL the old primary wrote after the new one was promoted has
#    replayed past the fork of the new timeline and can never stream from it; the operator
#    restarts such a member (Follow with rewind) and this is where it is rewound.
# 6. On a quarantined member (role label `quarantined`): standby.signal and an empty
#    primary_conninfo in postgresql.auto.conf, so it starts read-only and replicates from
#    nobody, its data untouched. The next start in another role removes the empty
#    primary_conninfo again.
# 7. Every standby streams through the physical replication slot member_<ordinal> on the
#    primary (primary_slot_name in postgresql.auto.conf; the operator creates the slots), and
#    holds no slot itself (a former primary's are removed: they would keep WAL on a standby).
# 8. A replica the operator asks to reseed (pod label database.example.com/reseed, a request
#    this volume has not carried out yet): its data directory is discarded and copied from the
#    primary again (step 4). The operator asks only for a replica that holds nothing the
#    primary lacks and can no longer catch up, or when a person asks (kubectl dbc reseed).
#
# A data directory that is not empty but holds no cluster is never removed: the script stops
# and asks for a person to look at the volume.
#
# Environment: POD_NAME, PRIMARY_HOST, PGDATA, POSTGRES_PASSWORD, REPLICATION_USER,
# REPLICATION_PASSWORD, ADMIN_USER, ADMIN_PASSWORD.

PORT=${PORT:-5432}
# The ConfigMap's files (overridable for tests).
CONFIG_DIR=${CONFIG_DIR:-/etc/database-operator}
# How long a former primary waits for the primary before it starts as a standby unrewound.
REWIND_WAIT_SECONDS=${REWIND_WAIT_SECONDS:-120}
# How many times (a second apart) the primary is asked for the checkpoint a rewind needs.
CHECKPOINT_TRIES=${CHECKPOINT_TRIES:-15}
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

# A password file $3 for user $1 with password $2, readable by this user only.
write_passfile() {
    mkdir -p "$RUN_DIR"
    umask 077
    printf '*:*:*:%s:%s\n' "$(pgpass_field "$1")" "$(pgpass_field "$2")" >"$3.new"
    mv "$3.new" "$3"
    umask 022
}

# The password file of the replication connection (pg_basebackup here, primary_conninfo later).
write_pgpass() {
    write_passfile "$REPLICATION_USER" "$REPLICATION_PASSWORD" "$RUN_DIR/pgpass"
}

# Sets the setting $1 in postgresql.auto.conf to $2, or without $2 removes its line.
set_auto_setting() {
    auto="$PGDATA/postgresql.auto.conf"
    if [ -f "$auto" ]; then
        sed "/^[[:space:]]*$1[[:space:]]*=/d" "$auto" >"$auto.new"
    else
        : >"$auto.new"
    fi
    if [ $# -gt 1 ]; then
        printf "%s = '%s'\n" "$1" "$2" >>"$auto.new"
    fi
    chmod 0600 "$auto.new"
    mv "$auto.new" "$auto"
}

# Sets primary_conninfo in postgresql.auto.conf to $1, or with no argument removes the line
# (the ConfigMap's postgresql.conf then applies: PRIMARY_HOST with the password file).
set_auto_conninfo() {
    set_auto_setting primary_conninfo "$@"
}

# The physical replication slot this member streams through on the primary.
SLOT_NAME="member_$ordinal"

# A standby streams through its own slot on the primary, and holds no slot itself: the slots a
# former primary kept for its standbys would keep WAL on this one for nothing (pg_rewind and
# pg_basebackup leave them out too).
stream_through_slot() {
    find "$PGDATA/pg_replslot" -mindepth 1 -maxdepth 1 -exec rm -rf {} + 2>/dev/null || true
    set_auto_setting primary_slot_name "$SLOT_NAME"
}

# Whether postgresql.auto.conf holds the empty primary_conninfo of a quarantine.
quarantine_conninfo() {
    grep -q "^[[:space:]]*primary_conninfo[[:space:]]*=[[:space:]]*''" \
        "$PGDATA/postgresql.auto.conf" 2>/dev/null
}

# The state pg_controldata reports (`shut down`, `shut down in recovery`, `in production`, ...).
cluster_state() {
    pg_controldata "$PGDATA" 2>/dev/null | sed -n 's/^Database cluster state: *//p'
}

# Rewinds a former primary to the primary's history (pg_rewind), after crash recovery in
# single-user mode when it was not shut down cleanly. Returns non-zero, with the data left as
# it was, when anything stands in the way; a dry run comes first, so a refusal (the primary
# unreachable, no common history, a login failure) never touches the data directory.
rewind_from_primary() {
    work=$(mktemp -d "$RUN_DIR/rewind.XXXXXX")
    waited=0
    until primary_answers; do
        if [ "$waited" -ge "$REWIND_WAIT_SECONDS" ]; then
            log "the primary $PRIMARY_HOST:$PORT did not answer for ${REWIND_WAIT_SECONDS}s: not rewinding"
            rm -rf "$work"
            return 1
        fi
        sleep 2
        waited=$((waited + 2))
    done
    state=$(cluster_state)
    case $state in
        'shut down' | 'shut down in recovery') ;;
        *)
            log "the data directory was not shut down cleanly ($state): crash recovery in single-user mode first"
            # With the members' configuration: its wal_keep_size keeps the WAL pg_rewind reads
            # back to the last common checkpoint (the defaults would recycle it).
            if ! postgres --single -D "$PGDATA" -c config_file="$CONFIG_DIR/postgresql.conf" \
                template1 </dev/null >"$work/single.log" 2>&1; then
                log "single-user crash recovery failed: $(tail -n 20 "$work/single.log")"
                rm -rf "$work"
                return 1
            fi
            ;;
    esac
    write_passfile "$ADMIN_USER" "$ADMIN_PASSWORD" "$RUN_DIR/admin-pgpass"
    source="host=$PRIMARY_HOST port=$PORT user=$ADMIN_USER dbname=postgres passfile=$RUN_DIR/admin-pgpass"
    # pg_rewind reads the source's timeline from its control file, which a promotion updates
    # only at its first checkpoint: without one, a just-promoted primary looks like the old
    # history, and the rewind either does nothing or rewinds to a point the new timeline does
    # not contain (the standby then never starts: "requested timeline N does not contain
    # minimum recovery point"). So no checkpoint, no rewind: asked again for a while (the
    # Service's name may not resolve for a moment while its endpoint moves), then given up
    # with the data untouched.
    tries=0
    until printf 'CHECKPOINT;\n' | psql --no-psqlrc --quiet "$source" >"$work/checkpoint.log" 2>&1; do
        tries=$((tries + 1))
        if [ "$tries" -ge "$CHECKPOINT_TRIES" ]; then
            log "could not ask $PRIMARY_HOST for a checkpoint $tries times: not rewinding (data untouched): $(tail -n 5 "$work/checkpoint.log")"
            rm -rf "$work" "$RUN_DIR/admin-pgpass"
            return 1
        fi
        sleep 1
    done
    if ! pg_rewind --target-pgdata="$PGDATA" --source-server="$source" --dry-run \
        >"$work/dry-run.log" 2>&1; then
        log "pg_rewind from $PRIMARY_HOST refused (data untouched): $(tail -n 20 "$work/dry-run.log")"
        rm -rf "$work" "$RUN_DIR/admin-pgpass"
        return 1
    fi
    if ! pg_rewind --target-pgdata="$PGDATA" --source-server="$source" >"$work/rewind.log" 2>&1; then
        log "pg_rewind from $PRIMARY_HOST failed: $(tail -n 20 "$work/rewind.log")"
        rm -rf "$work" "$RUN_DIR/admin-pgpass"
        return 1
    fi
    log "pg_rewind: $(tail -n 1 "$work/rewind.log")"
    rm -rf "$work" "$RUN_DIR/admin-pgpass"
}

# The timeline of this data directory's latest checkpoint (a standby's restartpoint).
own_timeline() {
    pg_controldata "$PGDATA" 2>/dev/null | sed -n "s/^Latest checkpoint's TimeLineID: *//p"
}

# The primary's current timeline (from its current WAL file's name), asked as the operator's
# account; nothing when it does not answer within a few seconds.
primary_timeline() {
    write_passfile "$ADMIN_USER" "$ADMIN_PASSWORD" "$RUN_DIR/admin-pgpass"
    printf "SELECT ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int;\n" |
        PGCONNECT_TIMEOUT=5 psql --no-psqlrc --quiet --tuples-only --no-align \
            "host=$PRIMARY_HOST port=$PORT user=$ADMIN_USER dbname=postgres passfile=$RUN_DIR/admin-pgpass" \
            2>/dev/null | tr -d ' '
    rm -f "$RUN_DIR/admin-pgpass"
}

# Whether this cleanly stopped standby is on another timeline than the primary (sets
# own_tli and primary_tli).
standby_behind_a_promotion() {
    [ "$(cluster_state)" = 'shut down in recovery' ] || return 1
    own_tli=$(own_timeline)
    primary_tli=$(primary_timeline)
    [ -n "$own_tli" ] && [ -n "$primary_tli" ] && [ "$own_tli" != "$primary_tli" ]
}

# The backup spec.bootstrap.fromBackup names, as `<method> <id>` (with a target time or LSN,
# the newest physical backup before it); exits with the command's code when it fails.
choose_backup() {
    set --
    if [ -n "${RESTORE_S3_ENDPOINT:-}" ]; then
        set -- "$@" --endpoint="$RESTORE_S3_ENDPOINT"
    fi
    if [ -n "${RESTORE_AWS_REGION:-}" ]; then
        set -- "$@" --region="$RESTORE_AWS_REGION"
    fi
    "$RESTORE_BINARY" backup choose --namespace="$RESTORE_FROM_NAMESPACE" \
        --cluster="$RESTORE_FROM_CLUSTER" --bucket="$RESTORE_S3_BUCKET" \
        --backup="$RESTORE_BACKUP" "$@"
}

# A new primary from the physical base backup $1 and the source's WAL archive: the operator
# binary checks and unpacks it into a directory beside the data directory, with
# recovery.signal and the recovery settings (restore_command, the target); a temporary server on
# a private socket replays the archive to the target and promotes; then the new cluster's
# passwords are set, the recovery settings reset, and the directory renamed into place. Any
# failure leaves the data directory empty: the next start of this container tries again.
restore_physical() {
    log "restoring base backup $1 of $RESTORE_FROM_NAMESPACE/$RESTORE_FROM_CLUSTER from bucket $RESTORE_S3_BUCKET, then its archive to ${RESTORE_TARGET_TIME:-${RESTORE_TARGET_LSN:-the end}}"
    target="$PGDATA.restore"
    download="$PGDATA.download"
    rm -rf "$target" "$download"
    mkdir -p "$download"
    work=$(mktemp -d "$RUN_DIR/init.XXXXXX")
    set -- --backup="$1"
    if [ -n "${RESTORE_S3_ENDPOINT:-}" ]; then
        set -- "$@" --endpoint="$RESTORE_S3_ENDPOINT"
    fi
    if [ -n "${RESTORE_AWS_REGION:-}" ]; then
        set -- "$@" --region="$RESTORE_AWS_REGION"
    fi
    # The report reaches the termination message only once the recovery has promoted; the
    # download goes to a directory of its own on the data volume, emptied before and after.
    BACKUP_REPORT_FILE="$work/report" TMPDIR="$download" "$RESTORE_BINARY" backup unpack \
        --namespace="$RESTORE_FROM_NAMESPACE" --cluster="$RESTORE_FROM_CLUSTER" \
        --bucket="$RESTORE_S3_BUCKET" --data-dir="$target" \
        --server-version="$(postgres --version)" --program="$RESTORE_BINARY" "$@" || {
        status=$?
        log "unpacking base backup ${1#--backup=} failed (see above; exit $status); the data directory was not created, the next start of this container tries again"
        rm -rf "$target" "$download" "$work"
        exit "$status"
    }
    rm -rf "$download"
    # The members' configuration (its limits must be at least the source's for the replay),
    # without archiving or synchronous commits: nothing to archive to, no standby to wait for.
    # The server and its restore command get the bucket's keys, not the database passwords.
    env -u POSTGRES_PASSWORD -u ADMIN_PASSWORD -u REPLICATION_PASSWORD \
        postgres -D "$target" -c config_file="$CONFIG_DIR/postgresql.conf" \
        -c listen_addresses= -c unix_socket_directories="$work" -c archive_mode=off \
        -c synchronous_standby_names= -c log_min_error_statement=panic \
        -c log_statement=none >"$work/server.log" 2>&1 &
    server_pid=$!
    waited=0
    until [ "$(psql --no-psqlrc --host="$work" --port="$PORT" --username=postgres \
        --dbname=postgres --tuples-only --no-align \
        --command='SELECT pg_is_in_recovery()' 2>/dev/null)" = f ]; do
        if ! kill -0 "$server_pid" 2>/dev/null; then
            server_pid=
            log "the recovery stopped: $(tail -n 20 "$work/server.log")"
            rm -rf "$target" "$work"
            fail "the recovery of base backup ${1#--backup=} failed; the data directory was not created"
        fi
        sleep 1
        waited=$((waited + 1))
        if [ $((waited % 60)) -eq 0 ]; then
            log "still recovering after ${waited}s: $(tail -n 1 "$work/server.log")"
        fi
    done
    reached=$(psql --no-psqlrc --host="$work" --port="$PORT" --username=postgres \
        --dbname=postgres --tuples-only --no-align \
        --command="SELECT coalesce(pg_last_xact_replay_timestamp()::text, 'none')" 2>/dev/null) ||
        reached=unknown
    log "recovered and promoted; the last transaction replayed committed at $reached"
    # The managed accounts get this cluster's passwords (the source's came with the files), and
    # ALTER SYSTEM settings (the recovery's) are reset.
    psql --no-psqlrc --host="$work" --port="$PORT" --username=postgres --dbname=postgres \
        --set=ON_ERROR_STOP=1 --quiet >/dev/null <<'SQL' || {
\getenv postgres_password POSTGRES_PASSWORD
\getenv repl_user REPLICATION_USER
\getenv repl_password REPLICATION_PASSWORD
\getenv admin_user ADMIN_USER
\getenv admin_password ADMIN_PASSWORD
ALTER ROLE postgres PASSWORD :'postgres_password';
SELECT format(CASE WHEN EXISTS (SELECT FROM pg_roles WHERE rolname = :'repl_user')
    THEN 'ALTER ROLE %I WITH REPLICATION LOGIN NOSUPERUSER PASSWORD %L'
    ELSE 'CREATE ROLE %I WITH REPLICATION LOGIN PASSWORD %L' END,
    :'repl_user', :'repl_password') \gexec
SELECT format(CASE WHEN EXISTS (SELECT FROM pg_roles WHERE rolname = :'admin_user')
    THEN 'ALTER ROLE %I WITH SUPERUSER LOGIN PASSWORD %L'
    ELSE 'CREATE ROLE %I WITH SUPERUSER LOGIN PASSWORD %L' END,
    :'admin_user', :'admin_password') \gexec
ALTER SYSTEM RESET ALL;
SQL
        stop_server
        rm -rf "$target" "$work"
        fail "could not set the passwords of the managed roles; the data directory was not created"
    }
    stop_server
    # The promotion's timeline history goes to this cluster's archive with its first segments
    # (the temporary server archived nothing): a later recovery from the archive needs it to
    # follow this timeline, and without it would pick the same timeline number again.
    for history in "$target"/pg_wal/*.history; do
        [ -e "$history" ] || continue
        name=${history##*/}
        if [ ! -e "$target/pg_wal/archive_status/$name.done" ]; then
            : >"$target/pg_wal/archive_status/$name.ready"
        fi
    done
    chmod 0700 "$target"
    if [ -d "$PGDATA" ]; then
        rmdir "$PGDATA"
    fi
    mv "$target" "$PGDATA"
    # The report, with the point reached when the server said one (a timestamp: digits, spaces,
    # and `:.+-` only, so it goes into the JSON as it is).
    if [ -n "${BACKUP_REPORT_FILE:-}" ] && [ -f "$work/report" ]; then
        case $reached in
            '' | *[!0-9\ :.+-]*) cp "$work/report" "$BACKUP_REPORT_FILE" ;;
            *) sed "s/}\$/,\"reached\":\"$reached\"}/" "$work/report" >"$BACKUP_REPORT_FILE" ;;
        esac
    fi
    rm -rf "$work"
    log "base backup restored and recovered into the new data directory"
}

initialize_primary() {
    if restoring; then
        chosen=$(choose_backup) || {
            status=$?
            log "choosing the backup of $RESTORE_FROM_NAMESPACE/$RESTORE_FROM_CLUSTER to restore failed (see above; exit $status); the next start of this container tries again"
            exit "$status"
        }
        # The id chosen, so a backup stored meanwhile does not change the choice.
        RESTORE_BACKUP=${chosen#* }
        if [ "${chosen%% *}" = physical ]; then
            restore_physical "$RESTORE_BACKUP"
            return
        fi
    fi
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
        --set=ON_ERROR_STOP=1 --quiet >/dev/null <<'SQL' || fail "could not create the replication and operator roles"
\getenv repl_user REPLICATION_USER
\getenv repl_password REPLICATION_PASSWORD
\getenv admin_user ADMIN_USER
\getenv admin_password ADMIN_PASSWORD
CREATE ROLE :"repl_user" WITH REPLICATION LOGIN PASSWORD :'repl_password';
CREATE ROLE :"admin_user" WITH SUPERUSER LOGIN PASSWORD :'admin_password';
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
    log "initialized: superuser postgres, the operator's role $ADMIN_USER and replication role $REPLICATION_USER"
}

seed_from_primary() {
    log "empty data directory: copying the primary $PRIMARY_HOST with pg_basebackup"
    wait_for_primary
    # This member's slot, before the copy starts, so that the primary keeps the WAL from here
    # on for it (the operator makes it too, whoever is first: an error that it exists is fine).
    printf 'CREATE_REPLICATION_SLOT %s PHYSICAL RESERVE_WAL;\n' "$SLOT_NAME" |
        PGPASSFILE="$RUN_DIR/pgpass" PGCONNECT_TIMEOUT=5 psql --no-psqlrc --quiet \
            "host=$PRIMARY_HOST port=$PORT user=$REPLICATION_USER replication=true" \
            >/dev/null 2>&1 || true
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
# TLS settings (postgresql.conf includes them from the run directory if they are there): only
# when this pod mounts the certificate; a pod of an earlier template starts without TLS.
if [ -r "$TLS_DIR/tls.crt" ] && [ -r "$CONFIG_DIR/tls.conf" ]; then
    cp "$CONFIG_DIR/tls.conf" "$RUN_DIR/tls.conf"
else
    rm -f "$RUN_DIR/tls.conf"
fi
# A standby whose connection to its primary checks a certificate with an authorities file this
# pod no longer mounts, or demands TLS (the cluster switched TLS off): the configured connection
# instead (libpq's default: TLS when the primary offers it).
if [ ! -r "$TLS_DIR/ca.crt" ] &&
    grep -q -e "^[[:space:]]*primary_conninfo[[:space:]]*=.*sslrootcert=" \
        -e "^[[:space:]]*primary_conninfo[[:space:]]*=.*sslmode=require" \
        "$PGDATA/postgresql.auto.conf" 2>/dev/null; then
    set_auto_conninfo
    log "TLS is off: primary_conninfo no longer checks a certificate"
fi

if [ "$role" = replica ] && has_data && reseed_pending "$PGDATA.reseeded"; then
    log "the operator asks to seed this member again (request $reseed_token): discarding its data directory and copying the primary"
    rm -rf "$PGDATA" "$PGDATA.seed"
fi
if has_data; then
    # The server refuses a data directory its group may write; a volume's fsGroup handling (or
    # a restore by hand) can leave it so. As the official image's entrypoint does, fix it.
    chmod 0700 "$PGDATA"
    if [ "$role" = quarantined ]; then
        set_auto_conninfo ""
        set_auto_setting primary_slot_name
        : >"$PGDATA/standby.signal"
        log "quarantined: starting read-only, replicating from nobody, data untouched"
        exit 0
    fi
    if quarantine_conninfo; then
        set_auto_conninfo
        log "no longer quarantined: primary_conninfo is the configured one again"
    fi
    if [ "$role" = replica ] && [ ! -e "$PGDATA/standby.signal" ]; then
        # A former primary (or a member that lost its label): never start it writable. It may
        # have written past the point where the current primary's history left it: rewind it.
        log "data directory of a former primary and the role is replica: rewinding it to $PRIMARY_HOST"
        if rewind_from_primary; then
            log "rewound to the history of $PRIMARY_HOST"
        else
            log "not rewound: starting as a standby anyway (it may not be able to stream; the operator decides)"
        fi
        set_auto_conninfo "host=$PRIMARY_HOST port=$PORT user=$REPLICATION_USER passfile=$RUN_DIR/pgpass"
        : >"$PGDATA/standby.signal"
        log "starting as a standby of $PRIMARY_HOST, not writable"
    elif [ "$role" = replica ] && standby_behind_a_promotion; then
        log "standby on timeline $own_tli, the primary $PRIMARY_HOST on $primary_tli: rewinding it to that history if it went past the fork"
        if REWIND_WAIT_SECONDS=0 rewind_from_primary; then
            log "standby rewound (or nothing to rewind): it follows timeline $primary_tli"
        else
            log "not rewound: starting as a standby anyway (it may not be able to stream; the operator decides)"
        fi
        # pg_rewind makes the data directory the source's (a primary's): no standby.signal, the
        # source's postgresql.auto.conf. It must start as a standby of the primary, never writable.
        set_auto_conninfo "host=$PRIMARY_HOST port=$PORT user=$REPLICATION_USER passfile=$RUN_DIR/pgpass"
        : >"$PGDATA/standby.signal"
        log "starting as a standby of $PRIMARY_HOST, not writable"
    else
        log "data directory present: nothing to seed"
    fi
    if [ "$role" = replica ]; then
        stream_through_slot
    fi
    exit 0
fi
if [ "$role" = quarantined ]; then
    fail "quarantined member without data: nothing to keep and nothing to serve"
fi
if [ -d "$PGDATA" ] && [ -n "$(ls -A "$PGDATA")" ]; then
    fail "$PGDATA is not empty but holds no PostgreSQL cluster; refusing to touch it, inspect the volume"
fi
if [ "$role" = primary ]; then
    await_empty_primary_role
fi
if [ "$role" = primary ]; then
    initialize_primary
else
    seed_from_primary
    stream_through_slot
    reseed_done "$PGDATA.reseeded"
fi
