#!/usr/bin/env bash
# Usage: scripts/alive.sh LABEL COMMAND [ARG...]
# Runs COMMAND; while it runs, prints "LABEL: still running (N s)" every 10 s (ALIVE_EVERY) when stdout is
# not a terminal, so a log of a long quiet step (pip unpacking torch) shows the job is alive.
# Exits with COMMAND's status.
set -u
label=$1; shift
every=${ALIVE_EVERY:-10}
if [ -t 1 ]; then exec "$@"; fi
"$@" &
child=$!
start=$(date +%s)
while kill -0 "$child" 2>/dev/null; do
  for _ in $(seq "$every"); do
    sleep 1
    kill -0 "$child" 2>/dev/null || break 2
  done
  echo "$label: still running ($(( $(date +%s) - start )) s)"
done
wait "$child"
