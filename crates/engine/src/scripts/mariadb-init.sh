
# Prepares a MariaDB member before the server starts (the database pod's init container).
# The server container only runs `mariadbd`: everything an image entrypoint would do happens
# here, so the pod behaves the same with the official image and on a node without its entrypoint.
#
# 1. Reads the member's ordinal from the pod name and its role from the pod label
#    database.example.com/role, which the operator sets (waits for it a little while).
# 2. Writes the server's option file RUN_DIR/my.cnf: the shared my.cnf plus server_id =
#    100 + ordinal, report_host and, on replicas, read_only.
# 3. On the primary with an empty data directory: mariadb-install-db, then, on a temporary
#    server without networking, sets the root password, creates root@'%', the operator's
#    account ADMIN_USER@'%' (only the privileges it uses, READ_ONLY ADMIN among them: it fences
#    and promotes)
#    and the replication user (statements read from stdin, never from the command line, and
#    kept out of the binlog). Replicas get the accounts with the copy.
#    A cluster that starts from a backup (spec.bootstrap.fromBackup, RESTORE_* variables)
#    does this in RESTORE_DIR, restores the backup into that temporary server with the
#    operator binary, then renames RESTORE_DIR to the data directory.
# 4. On a replica with an empty data directory: initializes an empty instance, loads a
#    consistent dump of the primary into it (mariadb-dump --single-transaction --gtid
#    --master-data, which records the GTID position), then points replication at the primary
#    with CHANGE MASTER TO ... MASTER_USE_GTID = slave_pos, over TLS when the primary serves it
#    (it may refuse plain connections).
#
# A quarantined member (role label `quarantined`) starts read-only and without replication
# (skip-slave-start), its data untouched.
#
# When the role is unknown, a member that already has data starts read-only: a member never
# accepts writes unless the operator has said it is the primary. Only ordinal 0 of a brand-new
# cluster (no data yet) bootstraps as primary without a label. A data directory that is not
# empty but holds no MariaDB data is never removed.
#
# Environment: POD_NAME, PRIMARY_HOST, HEADLESS_DOMAIN, MARIADB_ROOT_PASSWORD,
# REPLICATION_USER, REPLICATION_PASSWORD, ADMIN_USER, ADMIN_PASSWORD.

: "${MARIADB_ROOT_PASSWORD:?MARIADB_ROOT_PASSWORD must be set}"

# Where a cluster that starts from a backup builds its first data directory (overridable for
# tests).
RESTORE_DIR=${RESTORE_DIR:-/var/lib/mysql/restore}

replica_options() {
    echo 'read_only = ON'
}

quarantine_options() {
    echo 'skip-slave-start'
}

primary_answers() {
    mariadb-admin --defaults-extra-file="$1" --host="$PRIMARY_HOST" --port="$PORT" \
        --connect-timeout=5 --silent ping >/dev/null 2>&1
}

# Whether the primary serves TLS, asked with the client option file $1 (the client uses TLS
# when the server offers it): a primary with the cluster's certificate may refuse plain
# connections (require_secure_transport), so the channel must use TLS (MASTER_SSL = 1; the
# operator points it again with the certificate checked once it replicates); a primary of an
# earlier template, without TLS, is replicated from plainly. A question that gets no answer
# (tried three times) fails the init, which starts again: never a plain channel by mistake.
primary_serves_tls() {
    tries=0
    until answer=$(mariadb --defaults-extra-file="$1" --host="$PRIMARY_HOST" --port="$PORT" \
        --connect-timeout=5 -N -B -e "SHOW SESSION STATUS LIKE 'Ssl_version'" 2>&1); do
        tries=$((tries + 1))
        if [ "$tries" -ge 3 ]; then
            fail "could not ask $PRIMARY_HOST whether it serves TLS: $answer"
        fi
        sleep 2
    done
    [ -n "$(printf '%s\n' "$answer" | cut -f2)" ]
}

# Starts the server with the option file $3 (default: the member's), no networking, on the
# socket $1, logging to $2, without starting replication.
start_local_server() {
    mariadbd --defaults-file="${3:-$RUN_DIR/my.cnf}" --skip-networking --socket="$1" \
        --pid-file="$1.pid" --skip-slave-start --log-error="$2" &
    server_pid=$!
    tries=0
    until mariadb-admin --no-defaults --socket="$1" --user=root --silent ping >/dev/null 2>&1; do
        tries=$((tries + 1))
        if ! kill -0 "$server_pid" 2>/dev/null || [ "$tries" -gt 120 ]; then
            fail "the temporary server on $1 did not start: $(tail -n 20 "$2")"
        fi
        sleep 1
    done
}

stop_local_server() {
    mariadb-admin --no-defaults --socket="$1" --user=mysql shutdown
    wait "$server_pid" || true
    server_pid=
}

install_db() {
    mariadb-install-db --no-defaults --datadir="$1" --auth-root-authentication-method=socket \
        --auth-root-socket-user=mysql \
        --skip-test-db >"$2" 2>&1 || fail "mariadb-install-db failed: $(cat "$2")"
}

initialize_primary() {
    log "primary with an empty data directory: initializing it"
    work=$(mktemp -d "$RUN_DIR/init.XXXXXX")
    # A cluster that starts from a backup is built beside the data directory (RESTORE_DIR, with
    # this member's options but its own datadir) and renamed into place once restored: an
    # interrupted restore never looks like data.
    target="$DATA_DIR"
    defaults="$RUN_DIR/my.cnf"
    if restoring; then
        target="$RESTORE_DIR"
        rm -rf "$target"
        defaults="$work/restore.cnf"
        sed "s|^datadir = .*|datadir = $target|" "$RUN_DIR/my.cnf" >"$defaults"
    fi
    install_db "$target" "$work/install.log"
    start_local_server "$work/mysqld.sock" "$work/server.log" "$defaults"
    # The OS user mysql logs in through unix_socket (mysql@localhost, for this script, probes
    # and kubectl exec); root@localhost keeps unix_socket (the OS user root) and gets the
    # password; root@'%' may not write on a read-only server (no READ_ONLY ADMIN).
    password=$(sql_string "$MARIADB_ROOT_PASSWORD")
    quote_replication_account
    quote_admin_account
    mariadb --no-defaults --socket="$work/mysqld.sock" --user=mysql <<SQL ||
SET SESSION sql_log_bin = 0;
ALTER USER root@localhost IDENTIFIED VIA mysql_native_password USING PASSWORD($password) OR unix_socket;
CREATE USER root@'%' IDENTIFIED BY $password;
GRANT ALL PRIVILEGES ON *.* TO root@'%' WITH GRANT OPTION;
-- MariaDB has no super_read_only: without this, root over the network could write on a
-- read-only replica. root@localhost (kubectl exec) keeps it for repairs by hand.
REVOKE READ_ONLY ADMIN ON *.* FROM root@'%';
CREATE USER $repl_user@'%' IDENTIFIED BY $repl_password;
GRANT REPLICATION SLAVE ON *.* TO $repl_user@'%';
-- The operator's account: what it uses and nothing more (it fences with read_only, promotes,
-- points replication, reloads TLS, sets the superuser's password and dumps for backups; never
-- writes data, changes schemas or grants).
CREATE USER $admin_user@'%' IDENTIFIED BY $admin_password;
GRANT SELECT, RELOAD, PROCESS, LOCK TABLES, SHOW VIEW, EVENT, TRIGGER, CREATE USER, BINLOG MONITOR, SLAVE MONITOR, REPLICATION SLAVE ADMIN, REPLICATION MASTER ADMIN, READ_ONLY ADMIN, CONNECTION ADMIN ON *.* TO $admin_user@'%';
SQL
        fail "could not create the users"
    if restoring; then
        # As the OS user mysql on the socket (unix_socket): the backup's `mysql` schema is left
        # out, so the accounts just created stay.
        restore_from_backup "$work/mysqld.sock" mysql mariadb "$DATA_DIR.download"
    fi
    stop_local_server "$work/mysqld.sock"
    if restoring; then
        if [ -d "$DATA_DIR" ]; then
            rmdir "$DATA_DIR"
        fi
        mv "$target" "$DATA_DIR"
        log "backup restored into the new data directory"
    fi
    rm -rf "$work"
    log "initialized: root, the operator's account $ADMIN_USER and replication user $REPLICATION_USER"
}

seed_from_primary() {
    log "empty data directory: copying the primary $PRIMARY_HOST"
    work=$(mktemp -d "$RUN_DIR/init.XXXXXX")
    client_credentials root "$MARIADB_ROOT_PASSWORD" "$work/root.cnf"
    wait_for_primary "$work/root.cnf"
    rm -rf "$SEED_DIR"
    install_db "$SEED_DIR" "$work/install.log"
    # The seed is loaded with this member's options but in its own directory.
    sed "s|^datadir = .*|datadir = $SEED_DIR|" "$RUN_DIR/my.cnf" >"$work/seed.cnf"
    mariadbd --defaults-file="$work/seed.cnf" --skip-networking --socket="$work/mysqld.sock" \
        --pid-file="$work/mysqld.pid" --skip-slave-start --read-only=OFF \
        --log-error="$work/server.log" &
    server_pid=$!
    tries=0
    until mariadb-admin --no-defaults --socket="$work/mysqld.sock" --user=root --silent ping >/dev/null 2>&1; do
        tries=$((tries + 1))
        if ! kill -0 "$server_pid" 2>/dev/null || [ "$tries" -gt 120 ]; then
            fail "the temporary server did not start: $(tail -n 20 "$work/server.log")"
        fi
        sleep 1
    done
    # A consistent snapshot with its GTID position (SET GLOBAL gtid_slave_pos), loaded without
    # writing this member's binlog: the member's history is exactly the primary's.
    status_file="$work/dump.status"
    {
        echo 'SET SESSION sql_log_bin = 0;'
        mariadb-dump --defaults-extra-file="$work/root.cnf" --host="$PRIMARY_HOST" \
            --port="$PORT" --single-transaction --gtid --master-data=1 --all-databases \
            --routines --events --triggers --flush-privileges ||
            echo "$?" >"$status_file"
    } | mariadb --no-defaults --socket="$work/mysqld.sock" --user=mysql ||
        fail "loading the dump of $PRIMARY_HOST failed"
    if [ -s "$status_file" ]; then
        fail "mariadb-dump from $PRIMARY_HOST failed (exit status $(cat "$status_file"))"
    fi
    quote_replication_account
    host=$(sql_string "$PRIMARY_HOST")
    master_ssl=0
    if primary_serves_tls "$work/root.cnf"; then
        master_ssl=1
        log "the primary serves TLS: replicating over TLS"
    fi
    # The dump replaced the grant tables with the primary's, which keep mysql@localhost.
    mariadb --no-defaults --socket="$work/mysqld.sock" --user=mysql <<SQL ||
CHANGE MASTER TO
  MASTER_HOST = $host,
  MASTER_PORT = $PORT,
  MASTER_USER = $repl_user,
  MASTER_PASSWORD = $repl_password,
  MASTER_USE_GTID = slave_pos,
  MASTER_SSL = $master_ssl,
  MASTER_CONNECT_RETRY = 10;
SQL
        fail "could not configure replication"
    mariadb-admin --no-defaults --socket="$work/mysqld.sock" --user=mysql shutdown
    wait "$server_pid" || true
    server_pid=
    if [ -d "$DATA_DIR" ]; then
        rmdir "$DATA_DIR"
    fi
    # The copy is complete: make it the data directory in one rename.
    mv "$SEED_DIR" "$DATA_DIR"
    rm -rf "$work"
    log "copy complete: the server starts as a replica of $PRIMARY_HOST"
}

prepare_member MariaDB
