#!/bin/sh
# Takes one logical backup of the cluster, uploads it to an S3-compatible bucket, then deletes
# the oldest backups of this cluster beyond the newest RETENTION (the backup CronJob's job).
#
# Objects are named <S3_PREFIX><UTC timestamp>.sql.gz; pruning lists only that prefix and only
# keys of that shape, so nothing else in the bucket is ever touched. A dump that fails removes
# its partial upload and fails the job without pruning anything.
#
# Environment: ENGINE (mysql | mariadb | postgresql), BACKUP_HOST, DB_PASSWORD, S3_BUCKET, S3_PREFIX,
# RETENTION, and optionally S3_ENDPOINT, AWS_DEFAULT_REGION, AWS_ACCESS_KEY_ID,
# AWS_SECRET_ACCESS_KEY (without keys the pod's own cloud identity is used).
# Tools: mysqldump, mariadb-dump or pg_dumpall, gzip, aws (the AWS CLI).
set -eu

log() {
    printf '%s backup: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$*" >&2
}

fail() {
    log "$*"
    exit 1
}

: "${ENGINE:?ENGINE must be set}"
: "${BACKUP_HOST:?BACKUP_HOST must be set}"
: "${DB_PASSWORD:?DB_PASSWORD must be set}"
: "${S3_BUCKET:?S3_BUCKET must be set}"
: "${S3_PREFIX:?S3_PREFIX must be set}"
: "${RETENTION:?RETENTION must be set}"

case $RETENTION in
    '' | *[!0-9]*) fail "RETENTION must be a positive number, not $RETENTION" ;;
esac
if [ "$RETENTION" -lt 1 ]; then
    fail "RETENTION must be at least 1"
fi

s3() {
    if [ -n "${S3_ENDPOINT:-}" ]; then
        aws --endpoint-url "$S3_ENDPOINT" "$@"
    else
        aws "$@"
    fi
}

dump() {
    case $ENGINE in
        mysql)
            MYSQL_PWD=$DB_PASSWORD mysqldump --host="$BACKUP_HOST" --port=3306 --user=root \
                --single-transaction --routines --events --triggers --all-databases \
                --set-gtid-purged=OFF
            ;;
        mariadb)
            MYSQL_PWD=$DB_PASSWORD mariadb-dump --host="$BACKUP_HOST" --port=3306 --user=root \
                --single-transaction --routines --events --triggers --all-databases --gtid
            ;;
        postgresql)
            PGPASSWORD=$DB_PASSWORD pg_dumpall --host="$BACKUP_HOST" --port=5432 \
                --username=postgres --no-password --clean --if-exists
            ;;
        *)
            fail "unknown engine $ENGINE"
            ;;
    esac
}

stamp=$(date -u +%Y%m%dT%H%M%SZ)
key="$S3_PREFIX$stamp.sql.gz"
status_file=$(mktemp)

log "dumping $ENGINE from $BACKUP_HOST to s3://$S3_BUCKET/$key"
# POSIX sh has no pipefail: the dump records its own failure in status_file.
{ dump || echo "$?" >"$status_file"; } | gzip -c | s3 s3 cp - "s3://$S3_BUCKET/$key"
if [ -s "$status_file" ]; then
    s3 s3 rm "s3://$S3_BUCKET/$key" || true
    fail "the dump failed (exit status $(cat "$status_file")); the partial upload was removed"
fi
rm -f "$status_file"
log "uploaded s3://$S3_BUCKET/$key"

keys=$(s3 s3api list-objects-v2 --bucket "$S3_BUCKET" --prefix "$S3_PREFIX" \
    --query 'Contents[].Key' --output text | tr '\t' '\n' |
    sed -n 's/^\(.*[0-9]\{8\}T[0-9]\{6\}Z\.sql\.gz\)$/\1/p' | sort)
count=$(printf '%s\n' "$keys" | sed '/^$/d' | wc -l)
excess=$((count - RETENTION))
if [ "$excess" -gt 0 ]; then
    log "keeping the newest $RETENTION of $count backups, deleting $excess"
    printf '%s\n' "$keys" | sed '/^$/d' | head -n "$excess" | while IFS= read -r old; do
        s3 s3 rm "s3://$S3_BUCKET/$old"
    done
else
    log "$count backups stored, retention $RETENTION: nothing to prune"
fi
