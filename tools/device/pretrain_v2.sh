#!/usr/bin/env bash
# One pretraining call on a GPU machine without network access (docs/guides/pretraining.md,
# "Pretrained v2"):
#
#   bash tools/device/pretrain_v2.sh OUT [TIME_LIMIT_SECONDS] [scripts/pretrain_v2.py run flags]
#
# (scripts/pretrain_v2.sh forwards here.) Needs .device/pretrain/ at the repository's root from
# `bash tools/device/fetch_pretrain_deps.sh` (carried with the working tree); to continue a
# run, .device/pretrain/state/ holds what the call before wrote to its OUT
# (`bash tools/device/fetch_pretrain_deps.sh --state-from DIR` puts it there and keeps a copy).
# Unpacks the carried RDKit into a private folder (DEVICE_SITE, default /tmp/site-pretrain)
# put first on PYTHONPATH with the project, then runs one call
# that ends within TIME_LIMIT_SECONDS (default 540) of this script's start. OUT receives the
# state in parts of at most 15 MiB, progress.json and log.txt (at most 8 files); the call's
# report is the JSON printed last.
set -euo pipefail
start=$(date +%s)
cd "$(dirname "$0")/../.."
OUT=${1:?usage: bash tools/device/pretrain_v2.sh OUT [TIME_LIMIT_SECONDS] [run flags]}
LIMIT=${2:-540}
shift $(( $# >= 2 ? 2 : 1 ))
SITE=${DEVICE_SITE:-/tmp/site-pretrain}
DEST=.device/pretrain
if [ ! -f "$DEST/rdkit-cp312.tar.xz" ] || [ ! -f "$DEST/data/manifest.json" ]; then
  echo "no $DEST/rdkit-cp312.tar.xz or $DEST/data: run bash tools/device/fetch_pretrain_deps.sh first" >&2
  exit 2
fi
if ! python3 -c "import rdkit" 2>/dev/null; then
  mkdir -p "$SITE"
  [ -d "$SITE/rdkit" ] || tar -xJf "$DEST/rdkit-cp312.tar.xz" -C "$SITE"
  export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
echo "ready to run in $(( $(date +%s) - start )) s" >&2
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >&2 || true
mkdir -p "$OUT"
state=()
if [ -f "$DEST/state/state.parts.json" ]; then state=(--state "$DEST/state"); fi
python3 scripts/pretrain_v2.py run --data "$DEST/data" ${state[@]+"${state[@]}"} --out "$OUT" \
  --time-limit $(( LIMIT - ($(date +%s) - start) )) "$@"
