#!/usr/bin/env bash
# tools/device/fetch_pretrain_deps.sh, under the path this command has always had.
exec bash "$(dirname "$0")/../tools/device/fetch_pretrain_deps.sh" "$@"
