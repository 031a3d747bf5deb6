#!/usr/bin/env bash
# Run tools/device/device_check.py on a GPU machine without network access.
#
#   bash tools/device/device_run.sh OUT_DIR [device_check.py flags]
#
# (scripts/device_run.sh forwards here.) Needs .device/ at the repository's root from
# `bash tools/device/fetch_device_deps.sh` (run beforehand on a machine with network; the
# folder travels with the working tree). Installs the carried wheels into a
# private folder (DEVICE_SITE, default /tmp/site) that goes first on PYTHONPATH with the
# project itself, then runs the check with the carried data; OUT_DIR receives its report.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:?usage: bash tools/device/device_run.sh OUT_DIR [device_check.py flags]}
shift
SITE=${DEVICE_SITE:-/tmp/site}
if [ ! -d .device/wheels ]; then
  echo "no .device/wheels: run bash tools/device/fetch_device_deps.sh first" >&2
  exit 2
fi
t0=$(date +%s)
python3 -m pip install -q --disable-pip-version-check --no-index --no-deps --no-compile \
  --no-cache-dir --upgrade --target "$SITE" .device/wheels/*.whl
echo "installed the carried wheels in $(( $(date +%s) - t0 )) s" >&2
export PYTHONPATH="$PWD:$SITE${PYTHONPATH:+:$PYTHONPATH}"
export OUTDATED_IGNORE=1  # OGB's version check would try the network
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >&2 || true
python3 tools/device/device_check.py --out "$OUT" --data .device/data "$@"
