#!/usr/bin/env bash
# Compiles millpond's Spark functions and its Delta log store (jvm/src) against the Spark jars of the given Python's
# pyspark and delta-storage (from the jar folder `make jars` fills), into one jar.
# Usage: jvm/build.sh <python with pyspark> <output jar> [<jar folder>]. The jar folder defaults to MILLPOND_JARS,
# else this checkout's .cache/jars. `make setup`, `make wheel` and docker/Dockerfile run it.
set -euo pipefail
python=$1 out=$2
here=$(cd "$(dirname "$0")" && pwd)
jars=${3:-${MILLPOND_JARS:-$here/../.cache/jars}}
command -v javac >/dev/null || {
    echo "error: javac not found; it compiles millpond's Spark functions (jvm/). Fix: install a JDK 17 (apt-get install openjdk-17-jdk-headless)"
    exit 1
}
delta_storage=$(find "$jars" -maxdepth 1 -name 'delta-storage-*.jar' 2>/dev/null | sort -V | tail -n 1)
[ -n "$delta_storage" ] || {
    echo "error: delta-storage-*.jar not found in $jars; millpond's Delta log store (jvm/) compiles against it. Fix: run \`make jars\` (or \`millpond jars\`), or pass the folder holding it"
    exit 1
}
spark_jars=$("$python" -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')
classes=$(mktemp -d)
trap 'rm -rf "$classes"' EXIT
javac --release 17 -Xlint:all,-path -Werror -cp "$spark_jars/*:$delta_storage" -d "$classes" \
    $(find "$here/src/main/java" -name '*.java' | sort)
mkdir -p "$(dirname "$out")"
jar --create --file "$out.tmp" -C "$classes" .
mv "$out.tmp" "$out"
