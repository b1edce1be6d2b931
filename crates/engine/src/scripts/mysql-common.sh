
# The part shared by MySQL and MariaDB (mysql-common.sh): their paths, option files, SQL
# quoting, the member's option file, and their steps (prepare_member, which the engine's part
# calls last).
# The engine's part defines replica_options (the options a replica adds to the member's option
# file), quarantine_options (what a quarantined member adds: replication does not start),
# initialize_primary and seed_from_primary.
#
# Environment (MySQL and MariaDB): HEADLESS_DOMAIN.

# Paths as mounted by the StatefulSet (overridable for tests).
CONFIG_DIR=${CONFIG_DIR:-/etc/database-operator}
DATA_DIR=${DATA_DIR:-/var/lib/mysql/data}
SEED_DIR=${SEED_DIR:-/var/lib/mysql/seed}
PORT=${PORT:-3306}

: "${HEADLESS_DOMAIN:?HEADLESS_DOMAIN must be set}"

has_data() {
    [ -d "$DATA_DIR/mysql" ]
}

# Quotes $1 as an SQL string literal.
sql_string() {
    printf "'%s'" "$(printf '%s' "$1" | sed -e 's/\\/\\\\/g' -e "s/'/\\\\'/g")"
}

# Sets repl_user and repl_password to the replication account's name and password as SQL
# string literals.
quote_replication_account() {
    repl_password=$(sql_string "$REPLICATION_PASSWORD")
    repl_user=$(sql_string "$REPLICATION_USER")
}

# Sets admin_user and admin_password to the operator's account name and password as SQL string
# literals.
quote_admin_account() {
    admin_password=$(sql_string "$ADMIN_PASSWORD")
    admin_user=$(sql_string "$ADMIN_USER")
}

# Quotes $1 as an option file value.
option_value() {
    printf '"%s"' "$(printf '%s' "$1" | sed -e 's/\\/\\\\/g' -e 's/"/\\"/g')"
}

# A client option file ($3) with user $1 and password $2, readable by this user only:
# passwords reach the clients through it, never through the command line.
client_credentials() {
    umask 077
    {
        echo '[client]'
        echo "user = $1"
        echo "password = $(option_value "$2")"
    } >"$3"
    umask 022
}

# The server's option file RUN_DIR/my.cnf for the role $1: the shared my.cnf plus server_id =
# 100 + ordinal, report_host, on replicas replica_options, and on a quarantined member
# replica_options and quarantine_options (read-only, replication not started).
write_member_options() {
    mkdir -p "$RUN_DIR"
    {
        # The shared file; its TLS lines (and the refusal of plain connections) only when this
        # pod mounts the cluster's certificate (a pod of an earlier template, started while the
        # cluster switches TLS on, has none).
        if [ -r "$TLS_DIR/tls.crt" ]; then
            cat "$CONFIG_DIR/my.cnf"
        else
            grep -v -e '^ssl_' -e '^tls_version' -e '^require_secure_transport' "$CONFIG_DIR/my.cnf"
        fi
        echo
        echo '# This member (init.sh).'
        echo "server_id = $((100 + ordinal))"
        echo "report_host = $POD_NAME.$HEADLESS_DOMAIN"
        case $1 in
            replica) replica_options ;;
            quarantined)
                replica_options
                quarantine_options
                ;;
        esac
    } >"$RUN_DIR/my.cnf.new"
    mv "$RUN_DIR/my.cnf.new" "$RUN_DIR/my.cnf"
}

# Writes the member's option file, then initializes a new primary (only when the operator
# allows it: await_empty_primary_role) or seeds a new replica when the data directory is empty; $1 names
# the engine. A replica the operator asks to reseed (reseed_pending) discards its data directory
# first and is seeded as a new one. A data directory that is not empty but holds no data of the
# engine is never touched.
prepare_member() {
    role=$(member_role)
    log "ordinal $ordinal, role $role"

    write_member_options "$role"

    if [ "$role" = replica ] && has_data && reseed_pending "$DATA_DIR.reseeded"; then
        log "the operator asks to seed this member again (request $reseed_token): discarding its data directory and copying the primary"
        rm -rf "$DATA_DIR" "$SEED_DIR"
    fi
    if [ "$role" = quarantined ]; then
        has_data || fail "quarantined member without data: nothing to keep and nothing to serve"
        log "quarantined: starting read-only without replication, data untouched"
    elif has_data; then
        log "data directory present: nothing to seed"
    elif [ -d "$DATA_DIR" ] && [ -n "$(ls -A "$DATA_DIR")" ]; then
        fail "$DATA_DIR is not empty but holds no $1 data; refusing to touch it, inspect the volume"
    else
        if [ "$role" = primary ]; then
            await_empty_primary_role
        fi
        if [ "$role" = primary ]; then
            initialize_primary
        else
            # A primary whose volume came back empty is seeded as the replica it is now.
            write_member_options "$role"
            seed_from_primary
            reseed_done "$DATA_DIR.reseeded"
        fi
    fi
}
