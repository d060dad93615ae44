#!/usr/bin/env bash
# Start Airflow (scheduler, API server + UI, dag-processor, triggerer, LocalExecutor) in the background, in its own
# process group so `make down` stops all of it. Login required (SimpleAuthManager, generated admin password). Its
# metadata database is PostgreSQL: the one you configured (AIRFLOW__DATABASE__SQL_ALCHEMY_CONN and friends), else a
# database of its own on the catalog's server (millpond/catalog/database.py), as docker-compose does. SQLite stays
# for `airflow dags test` (make run-dag, make demo), where Airflow is one process.
set -euo pipefail
: "${AIRFLOW_HOME:?run through make up}"
PORT="${AIRFLOW_PORT:-8080}"
PGID_FILE="$AIRFLOW_HOME/airflow.pgid"
LOG="$AIRFLOW_HOME/airflow-standalone.log"
mkdir -p "$AIRFLOW_HOME"
if [[ -f "$PGID_FILE" ]] && kill -0 -- "-$(cat "$PGID_FILE")" 2>/dev/null; then
  echo "Airflow is already running (process group $(cat "$PGID_FILE")); make down stops it"
elif (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then
  echo "error: port $PORT is in use. Fix: stop what listens there, or AIRFLOW_PORT=<free port> make up" >&2
  exit 1
else
  export AIRFLOW__API__PORT="$PORT"
  export AIRFLOW__CORE__EXECUTION_API_SERVER_URL="http://localhost:$PORT/execution/"
  export AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION="${AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION:-False}"
  export AIRFLOW__CORE__PARALLELISM="${AIRFLOW__CORE__PARALLELISM:-4}"
  # A scheduler runs the DAGs here: their deadline alerts work (off for `airflow dags test`, apache/airflow#73428).
  export MILLPOND_DEADLINE_ALERTS="${MILLPOND_DEADLINE_ALERTS:-on}"
  # OpenLineage, for Airflow's provider (DAG and task events) and the tasks' table events alike (docs/lineage.md):
  # what the user configured the standard way, else one JSON line per event in a file of the Airflow home. An
  # openlineage.yml found by its place is named in OPENLINEAGE_CONFIG: the provider looks for it only there.
  for found in openlineage.yml "${HOME:-/nonexistent}/.openlineage/openlineage.yml"; do
    if [[ -z "${OPENLINEAGE_CONFIG:-}" && -f "$found" ]]; then export OPENLINEAGE_CONFIG="$(realpath "$found")"; fi
  done
  if [[ -z "${OPENLINEAGE_URL:-}${OPENLINEAGE_CONFIG:-}${OPENLINEAGE__TRANSPORT__TYPE:-}" ]] &&
    [[ -z "${AIRFLOW__OPENLINEAGE__TRANSPORT:-}${AIRFLOW__OPENLINEAGE__CONFIG_PATH:-}" ]]; then
    export OPENLINEAGE__TRANSPORT__TYPE=file OPENLINEAGE__TRANSPORT__APPEND=true
    export OPENLINEAGE__TRANSPORT__LOG_FILE_PATH="$AIRFLOW_HOME/openlineage.jsonl"
  fi
  export AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL="${AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL:-30}"
  # The scheduler queues the first run before the API server answers; with the 5 s / 5-retry defaults the task dies
  # on a busy machine (ReadTimeout on the execution API) and waits out its retry delay (300 s).
  export AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT="${AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT:-30}"
  export AIRFLOW__WORKERS__EXECUTION_API_RETRIES="${AIRFLOW__WORKERS__EXECUTION_API_RETRIES:-10}"
  # Four processes on one SQLite file (a user's choice) wait for its write lock rather than answer "database is
  # locked" after 5 s (millpond/airflow/database.py says why; on PostgreSQL its arguments are empty).
  export AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS="${AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS:-millpond.airflow.database.CONNECT_ARGS}"
  export AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS_ASYNC="${AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS_ASYNC:-millpond.airflow.database.ASYNC_CONNECT_ARGS}"
  if [[ -z "${AIRFLOW__DATABASE__SQL_ALCHEMY_CONN:-}${AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_CMD:-}${AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_SECRET:-}" ]]; then
    URL_FILE="$(millpond catalog airflow-db --airflow-home "$AIRFLOW_HOME")" || exit 1
    # Airflow splits a _CMD with shlex (no shell): the path quoted for it, spaces and all.
    printf -v AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_CMD 'cat %q' "$URL_FILE"
    export AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_CMD
  else
    echo "Airflow's metadata database: the one AIRFLOW__DATABASE__SQL_ALCHEMY_CONN* names"
  fi
  airflow db migrate >"$AIRFLOW_HOME/db-migrate-up.log" 2>&1 ||
    { tail -20 "$AIRFLOW_HOME/db-migrate-up.log" >&2; echo "error: airflow db migrate failed; see $AIRFLOW_HOME/db-migrate-up.log" >&2; exit 1; }
  # setsid: a new session and process group whose id is the leader's pid.
  setsid airflow standalone >"$LOG" 2>&1 </dev/null &
  LEADER=$!
  echo "$LEADER" >"$PGID_FILE"
  echo "Airflow starting (process group $LEADER, log $LOG) ..."
fi
for _ in $(seq 1 180); do
  if curl -fsS "http://localhost:$PORT/api/v2/monitor/health" >/dev/null 2>&1; then break; fi
  if ! kill -0 "$(cat "$PGID_FILE")" 2>/dev/null; then echo "error: Airflow exited; see $LOG" >&2; exit 1; fi
  sleep 1
done
PASSWORDS="$AIRFLOW_HOME/simple_auth_manager_passwords.json.generated"
for _ in $(seq 1 30); do [[ -s "$PASSWORDS" ]] && break; sleep 1; done
echo "Airflow UI:  http://localhost:$PORT   (login required)"
if [[ -s "$PASSWORDS" ]]; then
  python3 -c 'import json,sys; [print(f"  user {u}  password {p}") for u, p in json.load(open(sys.argv[1])).items()]' "$PASSWORDS"
else
    echo "  password: see $LOG (SimpleAuthManager prints the generated admin password)"
fi
echo "DAGs are unpaused at creation: the latest interval of each pipeline runs now. Stop everything: make down"
