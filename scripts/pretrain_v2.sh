#!/usr/bin/env bash
# tools/device/pretrain_v2.sh, under the path this command has always had.
exec bash "$(dirname "$0")/../tools/device/pretrain_v2.sh" "$@"
