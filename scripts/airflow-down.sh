#!/usr/bin/env bash
# Stop the process group `make up` started: SIGTERM, then SIGKILL what is left (LocalExecutor workers ignore TERM).
set -uo pipefail
: "${AIRFLOW_HOME:?run through make down}"
PGID_FILE="$AIRFLOW_HOME/airflow.pgid"
PORT="${AIRFLOW_PORT:-8080}"
if [[ ! -f "$PGID_FILE" ]]; then echo "Airflow is not running (no $PGID_FILE)"; exit 0; fi
PGID="$(cat "$PGID_FILE")"
kill -TERM -- "-$PGID" 2>/dev/null
for _ in $(seq 1 20); do kill -0 -- "-$PGID" 2>/dev/null || break; sleep 1; done
kill -KILL -- "-$PGID" 2>/dev/null
for _ in $(seq 1 10); do kill -0 -- "-$PGID" 2>/dev/null || break; sleep 1; done
rm -f "$PGID_FILE"
if kill -0 -- "-$PGID" 2>/dev/null; then echo "error: process group $PGID still alive" >&2; exit 1; fi
if (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then echo "warning: something still listens on :$PORT" >&2; exit 1; fi
echo "Airflow stopped (process group $PGID); nothing listens on :$PORT"
