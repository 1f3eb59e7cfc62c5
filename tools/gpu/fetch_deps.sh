#!/usr/bin/env bash
# Run HERE (the dev machine): downloads the Debian packages the GPU machine lacks
# (PCRE2 and xxhash headers + libraries; cpp-httplib and the headers it includes, for the
# server path of tools/gpu/run_invariance.sh) into .deps/, which is copied to the GPU machine.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .deps/debs
cd .deps/debs
[ -n "$(ls ./*.deb 2>/dev/null)" ] || apt-get download libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 \
  libpcre2-posix3 libxxhash-dev libxxhash0 libcpp-httplib-dev libcpp-httplib0.11 libssl-dev zlib1g-dev \
  libbrotli-dev libbrotli1 >/dev/null
ls
