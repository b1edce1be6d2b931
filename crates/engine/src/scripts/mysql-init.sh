
# Prepares a MySQL (8.4, 9.x) member before the server starts (the database pod's init
# container). The server container only runs `mysqld`: everything an image entrypoint would do
# happens here, so the pod behaves the same with the official image and on a node without it.
#
# 1. Reads the member's ordinal from the pod name and its role from the pod label
#    database.example.com/role, which the operator sets (waits for it a little while).
# 2. Writes the server's option file RUN_DIR/my.cnf: the shared my.cnf plus server_id =
#    100 + ordinal, report_host and, on replicas, read_only/super_read_only.
# 3. On the primary with an empty data directory: mysqld --initialize-insecure, then, on a
#    temporary server without networking, sets the root password, creates root@'%', the
#    operator's account ADMIN_USER@'%' (only what it uses: SYSTEM_VARIABLES_ADMIN for
#    read_only/super_read_only, REPLICATION_SLAVE_ADMIN, CONNECTION_ADMIN, CREATE USER and
#    SYSTEM_USER for root's password, reading for probes and backups), the replication user (also the clone donor account) and
#    mysql@localhost (auth_socket, for probes and kubectl exec). Replicas get the accounts
#    with the clone. Statements are read from stdin, never from the command line, and
#    kept out of the binlog.
# 4. On a replica with an empty data directory: clones the primary with the CLONE plugin, then
#    points replication at it with CHANGE REPLICATION SOURCE TO ... SOURCE_AUTO_POSITION = 1
#    (the statements of 8.4, which removed CHANGE MASTER); replication starts with the server.
#
# A quarantined member (role label `quarantined`) starts read-only (super_read_only) and
# without replication (skip_replica_start), its data untouched.
#
# When the role is unknown, a member that already has data starts read-only: a member never
# accepts writes unless the operator has said it is the primary. Only ordinal 0 of a brand-new
# cluster (no data yet) bootstraps as primary without a label. A data directory that is not
# empty but holds no MySQL data is never removed.
#
# Environment: POD_NAME, PRIMARY_HOST, HEADLESS_DOMAIN, MYSQL_ROOT_PASSWORD, REPLICATION_USER,
# REPLICATION_PASSWORD, ADMIN_USER, ADMIN_PASSWORD.

: "${MYSQL_ROOT_PASSWORD:?MYSQL_ROOT_PASSWORD must be set}"

replica_options() {
    echo 'read_only = ON'
    echo 'super_read_only = ON'
}

quarantine_options() {
    echo 'skip_replica_start = ON'
}

primary_answers() {
    mysqladmin --defaults-extra-file="$1" --host="$PRIMARY_HOST" --port="$PORT" \
        --connect-timeout=5 --silent ping >/dev/null 2>&1
}

# Starts a server with the option file $1 on the socket $2 (no networking, no replication),
# logging to $3, and waits until it answers.
start_local_server() {
    mysqld --defaults-file="$1" --skip-networking --socket="$2" --pid-file="$2.pid" \
        --skip-replica-start --log-error="$3" &
    server_pid=$!
    tries=0
    until mysqladmin --no-defaults --socket="$2" --user=root --silent ping >/dev/null 2>&1; do
        tries=$((tries + 1))
        if ! kill -0 "$server_pid" 2>/dev/null || [ "$tries" -gt 120 ]; then
            fail "the temporary server on $2 did not start: $(tail -n 20 "$3")"
        fi
        sleep 1
    done
}

# Stops the temporary server on socket $1, logging in with the client option file $2.
stop_local_server() {
    mysqladmin --defaults-extra-file="$2" --socket="$1" shutdown
    wait "$server_pid" || true
    server_pid=
}

# Initializes an empty instance with the option file $1 (mysqld --initialize-insecure, root
# without a password), logging to $2.
initialize_insecure() {
    mysqld --defaults-file="$1" --initialize-insecure --log-error="$2" ||
        fail "mysqld --initialize-insecure failed: $(cat "$2")"
}

initialize_primary() {
    log "primary with an empty data directory: initializing it"
    work=$(mktemp -d "$RUN_DIR/init.XXXXXX")
    initialize_insecure "$RUN_DIR/my.cnf" "$work/initialize.log"
    start_local_server "$RUN_DIR/my.cnf" "$work/mysqld.sock" "$work/server.log"
    password=$(sql_string "$MYSQL_ROOT_PASSWORD")
    quote_replication_account
    quote_admin_account
    mysql --no-defaults --socket="$work/mysqld.sock" --user=root <<SQL ||
SET SESSION sql_log_bin = 0;
ALTER USER root@localhost IDENTIFIED BY $password;
CREATE USER root@'%' IDENTIFIED BY $password;
GRANT ALL PRIVILEGES ON *.* TO root@'%' WITH GRANT OPTION;
CREATE USER $repl_user@'%' IDENTIFIED BY $repl_password;
GRANT REPLICATION SLAVE, BACKUP_ADMIN ON *.* TO $repl_user@'%';
CREATE USER $admin_user@'%' IDENTIFIED BY $admin_password;
GRANT SELECT, RELOAD, PROCESS, LOCK TABLES, SHOW VIEW, EVENT, TRIGGER, REPLICATION CLIENT, CREATE USER, SYSTEM_VARIABLES_ADMIN, REPLICATION_SLAVE_ADMIN, CONNECTION_ADMIN, SYSTEM_USER ON *.* TO $admin_user@'%';
CREATE USER mysql@localhost IDENTIFIED WITH auth_socket;
GRANT ALL PRIVILEGES ON *.* TO mysql@localhost WITH GRANT OPTION;
SQL
        fail "could not create the users"
    client_credentials root "$MYSQL_ROOT_PASSWORD" "$work/root.cnf"
    stop_local_server "$work/mysqld.sock" "$work/root.cnf"
    rm -rf "$work"
    log "initialized: root, the operator's account $ADMIN_USER and replication user $REPLICATION_USER"
}

seed_from_primary() {
    log "empty data directory: cloning the data of the primary $PRIMARY_HOST"
    if [ -d "$DATA_DIR" ]; then
        rmdir "$DATA_DIR"
    fi
    work=$(mktemp -d "$RUN_DIR/init.XXXXXX")
    client_credentials "$REPLICATION_USER" "$REPLICATION_PASSWORD" "$work/replication.cnf"
    wait_for_primary "$work/replication.cnf"
    rm -rf "$SEED_DIR"
    # An empty throwaway instance runs the CLONE statement; the clone lands in SEED_DIR.
    sed -e "s|^datadir = .*|datadir = $work/data|" -e '/read_only/d' "$RUN_DIR/my.cnf" >"$work/recipient.cnf"
    initialize_insecure "$work/recipient.cnf" "$work/initialize.log"
    start_local_server "$work/recipient.cnf" "$work/recipient.sock" "$work/recipient.log"
    host=$(sql_string "$PRIMARY_HOST")
    quote_replication_account
    mysql --no-defaults --socket="$work/recipient.sock" --user=root <<SQL ||
SET GLOBAL clone_valid_donor_list = '$PRIMARY_HOST:$PORT';
CLONE INSTANCE FROM $repl_user@$host:$PORT IDENTIFIED BY $repl_password DATA DIRECTORY = '$SEED_DIR';
SQL
        fail "cloning $PRIMARY_HOST failed: $(tail -n 20 "$work/recipient.log")"
    mysqladmin --no-defaults --socket="$work/recipient.sock" --user=root shutdown
    wait "$server_pid" || true
    server_pid=
    if [ -d "$DATA_DIR" ]; then
        rmdir "$DATA_DIR"
    fi
    # The clone is complete: make it the data directory in one rename.
    mv "$SEED_DIR" "$DATA_DIR"

    log "clone complete: configuring replication from $PRIMARY_HOST"
    start_local_server "$RUN_DIR/my.cnf" "$work/setup.sock" "$work/setup.log"
    # The clone carries the primary's accounts: root logs in with its password now.
    client_credentials root "$MYSQL_ROOT_PASSWORD" "$work/root.cnf"
    mysql --defaults-extra-file="$work/root.cnf" --socket="$work/setup.sock" <<SQL ||
CHANGE REPLICATION SOURCE TO
  SOURCE_HOST = $host,
  SOURCE_PORT = $PORT,
  SOURCE_USER = $repl_user,
  SOURCE_PASSWORD = $repl_password,
  SOURCE_AUTO_POSITION = 1,
  SOURCE_SSL = 1,
  SOURCE_CONNECT_RETRY = 10,
  SOURCE_RETRY_COUNT = 86400;
SQL
        fail "could not configure replication"
    stop_local_server "$work/setup.sock" "$work/root.cnf"
    rm -rf "$work"
    log "the server starts as a replica of $PRIMARY_HOST (replication starts with it)"
}

prepare_member MySQL
