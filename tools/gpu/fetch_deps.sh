#!/usr/bin/env bash
# Run HERE (the dev machine): downloads the Debian packages the GPU machine lacks
# (PCRE2 and xxhash headers + libraries; cpp-httplib and the headers it includes, for the
# server path of tools/gpu/run_invariance.sh; pytest and pybind11 for the Python package's
# tests, used there only when the machine has none) into .deps/, which is copied to the GPU machine.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .deps/debs
cd .deps/debs
for p in libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3 libxxhash-dev libxxhash0 \
  libcpp-httplib-dev libcpp-httplib0.11 libssl-dev zlib1g-dev libbrotli-dev libbrotli1 \
  python3-pytest python3-pluggy python3-iniconfig python3-packaging python3-py python3-attr pybind11-dev; do
  [ -n "$(ls ./"${p}"_*.deb 2>/dev/null)" ] || apt-get download "$p" >/dev/null
done
ls
