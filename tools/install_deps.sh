#!/usr/bin/env bash
# Installs the Debian 12 packages quiver builds against, if any is missing.
set -euo pipefail
pkgs=(cmake ninja-build g++ pkg-config nlohmann-json3-dev libcli11-dev libcpp-httplib-dev libpcre2-dev
      libxxhash-dev googletest libgtest-dev libbenchmark-dev
      python3-dev pybind11-dev python3-pybind11 python3-pytest)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "installing: ${missing[*]}"
sudo_cmd=()
[ "$(id -u)" -ne 0 ] && sudo_cmd=(sudo)
"${sudo_cmd[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq "${missing[@]}"
