#!/usr/bin/env bash
# Run HERE (the dev machine): downloads the Debian packages the GPU machine lacks
# (PCRE2 and xxhash headers + libraries; pytest and pybind11 for the Python package's
# tests, used there only when the machine has none) into .deps/, which runs on the GPU machine take along.
# The server (cpp-httplib) is left out of GPU builds (-DQUIVER_SERVER=OFF).
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .deps/debs
cd .deps/debs
for p in libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3 libxxhash-dev libxxhash0 \
  python3-pytest python3-pluggy python3-iniconfig python3-packaging python3-py python3-attr pybind11-dev; do
  [ -n "$(ls ./"${p}"_*.deb 2>/dev/null)" ] || apt-get download "$p" >/dev/null
done
ls
