#!/usr/bin/env bash
# Prepare what one pretraining call (tools/device/pretrain_v2.sh) needs on a GPU machine
# without network access, in .device/pretrain/ at the repository's root (git-ignored; carry
# that one folder):
#
#   bash tools/device/fetch_pretrain_deps.sh [SMILES_FILE ...]   # prepare .device/pretrain/
#   bash tools/device/fetch_pretrain_deps.sh --state-from DIR     # keep what a call brought back
#
# (scripts/fetch_pretrain_deps.sh forwards here.)
# * rdkit-cp312.tar.xz: RDKit's wheel for CPython 3.12 x86-64 (the version of
#   fetch_device_deps.sh), unpacked without rdkit/Contrib (data files no descriptor reads) and
#   packed again with xz: the wheel's 31.8 MB become 15.8 MB;
# * data/: the pretraining molecules as xz shards (scripts/pretrain_v2.py pack). Default
#   SMILES_FILE: MOSES's training set minus every molecule of the evaluation data, written by
#   scripts/pretrain_data.py (run it first: it reads the evaluation data);
# * state/: the state of the run so far (empty before the first call).
#
# All three are made once in a folder that outlives the working tree (PRETRAIN_V2_KEEP,
# default $GRAPHORMER_URPE_BENCH_CACHE/pretrain_v2, itself by default
# ~/.cache/graphormer-urpe/bench; put it on storage that lasts until the next GPU session)
# and copied from there into .device/pretrain/. `--state-from DIR` stores the files of DIR (a
# call's OUT as it came back) as the new state, there and in .device/pretrain/state/.
# Prints the sizes: the working tree and .device/pretrain must stay under 64 MiB together.
set -euo pipefail
cd "$(dirname "$0")/../.."
DEST=.device/pretrain
KEEP=${PRETRAIN_V2_KEEP:-${GRAPHORMER_URPE_BENCH_CACHE:-$HOME/.cache/graphormer-urpe/bench}/pretrain_v2}
RDKIT=rdkit==2026.9.1
mkdir -p "$KEEP/state" "$DEST"
if [ "${1:-}" = "--state-from" ]; then
  FROM=${2:?usage: bash tools/device/fetch_pretrain_deps.sh --state-from DIR}
  [ -f "$FROM/state.parts.json" ] || { echo "no state.parts.json in $FROM" >&2; exit 2; }
  rm -rf "$KEEP/state.new" && mkdir "$KEEP/state.new" && cp "$FROM"/* "$KEEP/state.new/"
  chmod -R u+w "$KEEP/state.new"
  rm -rf "$KEEP/state" && mv "$KEEP/state.new" "$KEEP/state"
  shift 2
fi
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
if [ ! -f "$KEEP/rdkit-cp312.tar.xz" ]; then
  python3 -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
    --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$TMP/wheel" "$RDKIT"
  mkdir "$TMP/site"
  python3 -m zipfile -e "$TMP"/wheel/rdkit-*.whl "$TMP/site"
  rm -rf "$TMP/site/rdkit/Contrib" "$TMP/site/rdkit-stubs"
  (cd "$TMP/site" && tar --sort=name --owner=0 --group=0 --numeric-owner -cf - . | xz -9e -T1) \
    > "$KEEP/.rdkit.tmp"
  mv "$KEEP/.rdkit.tmp" "$KEEP/rdkit-cp312.tar.xz"
fi
if [ ! -f "$KEEP/data/manifest.json" ]; then
  if [ $# -eq 0 ]; then
    set -- "${GRAPHORMER_URPE_BENCH_CACHE:-$HOME/.cache/graphormer-urpe/bench}/moses_train_minus_shared.smi"
  fi
  args=()
  for f in "$@"; do
    [ -f "$f" ] || { echo "no SMILES file $f (run python scripts/pretrain_data.py first)" >&2; exit 2; }
    args+=(--source "$f")
  done
  rm -rf "$KEEP/data"
  python3 scripts/pretrain_v2.py pack "${args[@]}" --out "$TMP/data" > "$TMP/pack.json"
  mv "$TMP/data" "$KEEP/data"
fi
rm -rf "$DEST/data" "$DEST/state"
cp "$KEEP/rdkit-cp312.tar.xz" "$DEST/"
cp -r "$KEEP/data" "$KEEP/state" "$DEST/"
tree=$(git ls-files -z | du -cb --files0-from=- | tail -1 | cut -f1)
carried=$(du -sb "$DEST" | cut -f1)
echo "{\"keep\": \"$KEEP\", \"rdkit_bytes\": $(stat -c %s "$DEST/rdkit-cp312.tar.xz"), \
\"data_bytes\": $(du -sb "$DEST/data" | cut -f1), \"state_bytes\": $(du -sb "$DEST/state" | cut -f1), \
\"carried_bytes\": $carried, \"tree_bytes\": $tree, \"total_bytes\": $((carried + tree)), \
\"limit_bytes\": $((64 * 1024 * 1024))}"
