#!/usr/bin/env bash
# Run HERE (the dev machine): downloads the Debian packages the GPU machine lacks
# (PCRE2 and xxhash headers + libraries) into .deps/, which is copied to the GPU machine.
# The server (cpp-httplib) is left out of GPU builds (-DQUIVER_SERVER=OFF).
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .deps/debs
cd .deps/debs
[ -n "$(ls ./*.deb 2>/dev/null)" ] || apt-get download libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 \
  libpcre2-posix3 libxxhash-dev libxxhash0 >/dev/null
ls
