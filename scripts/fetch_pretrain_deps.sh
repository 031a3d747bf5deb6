#!/usr/bin/env bash
# Prepare what one pretraining call (scripts/pretrain_v2.sh) needs on a GPU machine without
# network access, in .device/pretrain/ (git-ignored; carry that one folder):
#
#   bash scripts/fetch_pretrain_deps.sh [SMILES_FILE ...]
#
# * rdkit-cp312.tar.xz: RDKit's wheel for CPython 3.12 x86-64 (the version of
#   fetch_device_deps.sh), unpacked without rdkit/Contrib (data files no descriptor reads) and
#   packed again with xz: the wheel's 31.8 MB become about 16 MB;
# * data/: the pretraining molecules as xz shards (scripts/pretrain_v2.py pack). Default
#   SMILES_FILE: MOSES's training set minus every molecule of the evaluation data, written by
#   scripts/pretrain_data.py (run it first: it reads the evaluation data).
#
# The state of the calls goes to .device/pretrain/state/ (copy there what a call brought back).
# Prints the sizes: the working tree and .device/pretrain must stay under 64 MiB together.
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=.device/pretrain
RDKIT=rdkit==2026.9.1
if [ $# -eq 0 ]; then
  set -- "${GRAPHORMER_URPE_BENCH_CACHE:-$HOME/.cache/graphormer-urpe/bench}/moses_train_minus_shared.smi"
fi
for f in "$@"; do
  [ -f "$f" ] || { echo "no SMILES file $f (run python scripts/pretrain_data.py first)" >&2; exit 2; }
done
mkdir -p "$DEST"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
if [ ! -f "$DEST/rdkit-cp312.tar.xz" ]; then
  python3 -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
    --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$TMP/wheel" "$RDKIT"
  mkdir "$TMP/site"
  python3 -m zipfile -e "$TMP"/wheel/rdkit-*.whl "$TMP/site"
  rm -rf "$TMP/site/rdkit/Contrib" "$TMP/site/rdkit-stubs"
  (cd "$TMP/site" && tar --sort=name --owner=0 --group=0 --numeric-owner -cf - . \
    | xz -9e -T1 > "$OLDPWD/$DEST/.rdkit.tmp") && mv "$DEST/.rdkit.tmp" "$DEST/rdkit-cp312.tar.xz"
fi
args=()
for f in "$@"; do args+=(--source "$f"); done
python3 scripts/pretrain_v2.py pack "${args[@]}" --out "$DEST/data" > "$TMP/pack.json"
mkdir -p "$DEST/state"
tree=$(git ls-files -z | du -cb --files0-from=- | tail -1 | cut -f1)
carried=$(du -sb "$DEST" | cut -f1)
echo "{\"rdkit_bytes\": $(stat -c %s "$DEST/rdkit-cp312.tar.xz"), \
\"data_bytes\": $(du -sb "$DEST/data" | cut -f1), \"state_bytes\": $(du -sb "$DEST/state" | cut -f1), \
\"carried_bytes\": $carried, \"tree_bytes\": $tree, \"total_bytes\": $((carried + tree)), \
\"limit_bytes\": $((64 * 1024 * 1024))}"
