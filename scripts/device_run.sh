#!/usr/bin/env bash
# tools/device/device_run.sh, under the path this command has always had.
exec bash "$(dirname "$0")/../tools/device/device_run.sh" "$@"
