#!/usr/bin/env bash
# Fresh-install check: what a new user gets. Clones the repository into a temporary directory,
# installs with an empty pip cache (PIP_NO_CACHE_DIR=1) and an empty Dossier model cache, runs
# `make demo` and `make test`, and prints the time of each step, whether pip built anything
# from source (its log must have no "Building wheel for" a C/C++ package), and the end of each log.
#
# Usage:
#   scripts/fresh_install_check.sh [--repo PATH] [--work DIR] [--steps install,demo,test]
#     --repo   the repository to clone (default: the one holding this script; its committed HEAD)
#     --work   the folder to work in (default: a new temporary folder); give the folder of an
#              earlier call with --steps test to continue there (e.g. to time install + demo alone)
#     --steps  which steps to run, in order (default: all three)
# Exit status: 0 when every step passed and nothing was compiled, 1 otherwise.
set -uo pipefail

repo=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
work=""
steps="install,demo,test"
while [ $# -gt 0 ]; do
  case "$1" in
    --repo) repo=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "fresh_install_check: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ -n "$work" ] || work=$(mktemp -d /tmp/dossier-fresh.XXXXXX)
mkdir -p "$work"
export PIP_NO_CACHE_DIR=1             # nothing from an earlier build: every wheel is downloaded or compiled afresh
export PIP_LOG="$work/pip.log"        # pip's verbose log, appended by every pip call of `make install`
export DOSSIER_CACHE="$work/cache"    # models converted afresh, as on a new machine
failed=0

if [ ! -d "$work/dossier" ]; then
  git clone --quiet "$repo" "$work/dossier" || { echo "fresh_install_check: cannot clone $repo" >&2; exit 1; }
fi
cd "$work/dossier" || exit 1
echo "fresh install check of $(git log -1 --format='%h %s' | cut -c1-80)"
echo "in $work ($(nproc) CPUs, $(python3 --version 2>&1), PIP_NO_CACHE_DIR=1, load $(cut -d' ' -f1-3 /proc/loadavg))"

run_step() {  # run_step NAME COMMAND...: time it, keep its log, print one line and the log's last lines
  local name=$1; shift
  local start=$(date +%s) status
  if "$@" > "$work/$name.log" 2>&1; then status=ok; else status=FAILED; failed=1; fi
  echo "$name: $status in $(( $(date +%s) - start )) s  ($*; log $work/$name.log)"
}

for step in ${steps//,/ }; do
  case "$step" in
    install)
      run_step install make install
      # Every wheel pip built itself: only this project (pure Python, editable) may appear.
      built=$(grep -oE "Building (wheel|editable) for [A-Za-z0-9_.-]+" "$PIP_LOG" 2>/dev/null | awk '{print $4}' | sort -u)
      others=$(echo "$built" | grep -v -x -E "dossier|" || true)
      echo "  pip built from source: ${built:-nothing}$( [ -n "$built" ] && echo ' (this project: pure Python, no compiler)')"
      if [ -n "$others" ]; then echo "  FAILED: compiled $others"; failed=1; fi
      grep -E "make install: [0-9]+ s|check_install" "$work/install.log" | sed 's/^/  /'
      ;;
    demo)
      run_step demo make demo
      grep -E "episodes in|accuracy \(ANLS|^Page F1|make demo:" "$work/demo.log" | sed 's/^/  /'
      ;;
    test)
      run_step test make test
      tail -n 1 "$work/test.log" | sed 's/^/  /'
      ;;
    *) echo "fresh_install_check: unknown step $step (install, demo or test)" >&2; exit 2 ;;
  esac
done
echo "fresh install check: $( [ $failed = 0 ] && echo passed || echo FAILED )"
exit $failed
