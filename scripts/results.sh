#!/usr/bin/env bash
# Dossier's results tables (docs/results/<table>.md and .json), made or resumed by one command.
#   scripts/results.sh [TABLE ...] [--check] [--list] [--rows a,b] [--threads N]
# See scripts/results.py's docstring (or --help) for what each table holds.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-$root/.venv/bin/python}
[ -x "$python" ] || python=python3
cd "$root" && exec "$python" scripts/results.py "$@"
