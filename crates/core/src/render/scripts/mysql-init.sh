#!/bin/sh
# Prepares a MySQL member before the server starts (the database pod's init container).
#
# 1. Reads the member's ordinal from the pod name and its role from the pod label
#    database.example.com/role, which the operator sets (waits for it a little while).
# 2. Writes the member's own settings next to the shared my.cnf: server_id = 100 + ordinal,
#    report_host, and read_only/super_read_only on replicas.
# 3. On a replica whose data directory is empty, clones the data from the primary with the CLONE
#    plugin, then points replication at the primary with GTID auto-positioning.
#
# When the role is unknown, a member that already has data starts read-only: a member never
# accepts writes unless the operator has said it is the primary. Only ordinal 0 of a brand-new
# cluster (no data yet) bootstraps as primary without a label.
#
# Environment: POD_NAME, PRIMARY_HOST, HEADLESS_DOMAIN, MYSQL_ROOT_PASSWORD.
set -eu

# Paths as mounted by the StatefulSet (overridable for tests).
CONFIG_DIR=${CONFIG_DIR:-/etc/database-operator}
PODINFO_LABELS=${PODINFO_LABELS:-/etc/podinfo/labels}
CONF_D=${CONF_D:-/etc/mysql/conf.d}
DATA_DIR=${DATA_DIR:-/var/lib/mysql/data}
SEED_DIR=${SEED_DIR:-/var/lib/mysql/seed}
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
: "${HEADLESS_DOMAIN:?HEADLESS_DOMAIN must be set}"
: "${MYSQL_ROOT_PASSWORD:?MYSQL_ROOT_PASSWORD must be set}"

ordinal=${POD_NAME##*-}
case $ordinal in
    '' | *[!0-9]*) fail "cannot read an ordinal from the pod name $POD_NAME" ;;
esac

has_data() {
    [ -d "$DATA_DIR/mysql" ]
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

# Quotes $1 as a MySQL string literal.
sql_string() {
    printf "'%s'" "$(printf '%s' "$1" | sed -e 's/\\/\\\\/g' -e "s/'/\\\\'/g")"
}

server_pid=
stop_server() {
    if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
        kill "$server_pid"
        wait "$server_pid" || true
    fi
    server_pid=
}
trap stop_server EXIT

wait_for_socket() {
    tries=0
    until mysqladmin --no-defaults --socket="$1" --user=root ping --silent >/dev/null 2>&1; do
        tries=$((tries + 1))
        if [ "$tries" -gt 120 ]; then
            fail "the temporary server on $1 did not start; see $2"
        fi
        sleep 1
    done
}

seed_from_primary() {
    log "empty data directory: cloning the data of the primary $PRIMARY_HOST"
    work=$(mktemp -d)
    rm -rf "$SEED_DIR"
    # An empty throwaway instance runs the CLONE statement; the clone lands in SEED_DIR.
    mysqld --no-defaults --initialize-insecure --datadir="$work/data" --log-error="$work/initialize.log" ||
        fail "could not initialize the temporary instance: $(cat "$work/initialize.log")"
    mysqld --no-defaults --datadir="$work/data" --socket="$work/mysqld.sock" --pid-file="$work/mysqld.pid" \
        --skip-networking --mysqlx=OFF --log-error="$work/recipient.log" &
    server_pid=$!
    wait_for_socket "$work/mysqld.sock" "$work/recipient.log"
    password=$(sql_string "$MYSQL_ROOT_PASSWORD")
    mysql --no-defaults --socket="$work/mysqld.sock" --user=root <<SQL
INSTALL PLUGIN clone SONAME 'mysql_clone.so';
SET GLOBAL clone_valid_donor_list = '$PRIMARY_HOST:3306';
CLONE INSTANCE FROM 'root'@'$PRIMARY_HOST':3306 IDENTIFIED BY $password DATA DIRECTORY = '$SEED_DIR';
SQL
    mysqladmin --no-defaults --socket="$work/mysqld.sock" --user=root shutdown
    wait "$server_pid" || true
    server_pid=
    # The clone is complete: make it the data directory in one rename.
    mv "$SEED_DIR" "$DATA_DIR"

    log "clone complete: configuring replication from $PRIMARY_HOST"
    mysqld --datadir="$DATA_DIR" --socket="$work/setup.sock" --pid-file="$work/setup.pid" \
        --skip-networking --mysqlx=OFF --skip-replica-start --log-error="$work/setup.log" &
    server_pid=$!
    wait_for_socket "$work/setup.sock" "$work/setup.log"
    MYSQL_PWD=$MYSQL_ROOT_PASSWORD mysql --no-defaults --socket="$work/setup.sock" --user=root <<SQL
CHANGE REPLICATION SOURCE TO
  SOURCE_HOST = '$PRIMARY_HOST',
  SOURCE_PORT = 3306,
  SOURCE_USER = 'root',
  SOURCE_PASSWORD = $password,
  SOURCE_AUTO_POSITION = 1,
  SOURCE_SSL = 1,
  SOURCE_CONNECT_RETRY = 10,
  SOURCE_RETRY_COUNT = 86400;
SQL
    MYSQL_PWD=$MYSQL_ROOT_PASSWORD mysqladmin --no-defaults --socket="$work/setup.sock" --user=root shutdown
    wait "$server_pid" || true
    server_pid=
    rm -rf "$work"
}

role=$(member_role)
log "ordinal $ordinal, role $role"

cp "$CONFIG_DIR/my.cnf" "$CONF_D/10-database-operator.cnf"
{
    echo '[mysqld]'
    echo "server_id = $((100 + ordinal))"
    echo "report_host = $POD_NAME.$HEADLESS_DOMAIN"
    if [ "$role" = replica ]; then
        echo 'read_only = ON'
        echo 'super_read_only = ON'
    fi
} >"$CONF_D/20-member.cnf"

if has_data; then
    log "data directory present: nothing to seed"
elif [ -d "$DATA_DIR" ] && [ -n "$(ls -A "$DATA_DIR")" ]; then
    fail "$DATA_DIR is not empty but holds no MySQL data; refusing to touch it, inspect the volume"
elif [ "$role" = primary ]; then
    log "primary with an empty data directory: the server initializes it"
else
    if [ -d "$DATA_DIR" ]; then
        rmdir "$DATA_DIR"
    fi
    seed_from_primary
fi
