#!/usr/bin/env bash
# Run THERE (the GPU machine), sourced: unpacks the carried .deps/debs into .deps/root
# and points pkg-config at them, relocated to where they now live.
root="$PWD/.deps/root"
mkdir -p "$root"
pc="$root/usr/lib/x86_64-linux-gnu/pkgconfig"
if [ ! -e "$root/.unpacked" ]; then  # once: builds running meanwhile read these files
  for f in .deps/debs/*.deb; do dpkg -x "$f" "$root"; done
  for f in "$pc"/*.pc; do sed -i "s|^prefix=.*|prefix=$root/usr|" "$f"; done
  touch "$root/.unpacked"
fi
export PKG_CONFIG_PATH="$pc${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
export LD_LIBRARY_PATH="$root/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
