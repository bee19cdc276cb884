#!/usr/bin/env bash
# Install Debian packages the build or the tests need, when run as root; otherwise say how.
set -euo pipefail
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "missing Debian packages: $*; install them: sudo apt-get install $*" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
wait=(-o DPkg::Lock::Timeout=600)
apt-get "${wait[@]}" install -y -q "$@" >/dev/null || { apt-get "${wait[@]}" update -q >/dev/null && apt-get "${wait[@]}" install -y -q "$@" >/dev/null; }
