#!/usr/bin/env bash
# Prepare what tools/device/device_check.py needs on a GPU machine without network access.
#
#   bash tools/device/fetch_device_deps.sh [DATA_DIR]
#
# (scripts/fetch_device_deps.sh forwards here.)
# Downloads wheels (x86-64 Linux, CPython 3.12) into .device/wheels for what such a machine
# typically lacks: RDKit, OGB and their small dependencies, and Hugging Face's transformers
# 4.57.6 (the last release with its Graphormer) with the huggingface_hub and tokenizers it
# accepts, plus scikit-learn (which OGB imports); Hugging Face's collator is built with the
# machine's own Cython when it has one and a compiler. Copies the molecules the
# check reads (DATA_DIR, default ../shared/data: zinc/{train,val}.csv and the PCQM4Mv2 sample
# in OGB's layout) into .device/data. Both folders are git-ignored; tools/device/device_run.sh
# installs the wheels into a private folder and runs the check. Prints the total size, which
# must stay small enough to travel with the working tree.
set -euo pipefail
cd "$(dirname "$0")/../.."
DATA_DIR=${1:-../shared/data}
DEST=.device
WHEELS=(
  rdkit==2026.9.1
  ogb==1.3.6
  outdated==0.2.2
  littleutils==0.2.4
  six==1.17.0
  transformers==4.57.6
  huggingface_hub==0.36.2
  tokenizers==0.22.2
  scikit-learn==1.9.1
  joblib==1.6.0
  threadpoolctl==3.8.0
  narwhals==2.29.0
)
mkdir -p "$DEST/wheels" "$DEST/data"
for w in "${WHEELS[@]}"; do
  python3 -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
    --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$DEST/wheels" "$w"
done
# the data the check reads (small; never committed)
mkdir -p "$DEST/data/zinc"
cp "$DATA_DIR/zinc/train.csv" "$DATA_DIR/zinc/val.csv" "$DEST/data/zinc/"
rm -rf "$DEST/data/pcqm4mv2-sample"
cp -r "$DATA_DIR/pcqm4mv2-sample" "$DEST/data/pcqm4mv2-sample"
chmod -R u+w "$DEST/data"
ls -l "$DEST/wheels"
du -sh "$DEST/wheels" "$DEST/data"
echo "total (bytes): $(du -sb "$DEST" | cut -f1)"
