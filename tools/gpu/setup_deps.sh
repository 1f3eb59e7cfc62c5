#!/usr/bin/env bash
# Run THERE (the GPU machine), sourced: unpacks the carried .deps/debs into .deps/root
# and points pkg-config at them, relocated to where they now live.
root="$PWD/.deps/root"
mkdir -p "$root"
pc="$root/usr/lib/x86_64-linux-gnu/pkgconfig"
# Each package once (builds running meanwhile read these files); a package added to
# .deps/debs later is unpacked the next time this runs.
unpacked=
for f in .deps/debs/*.deb; do
  mark="$root/.unpacked-$(basename "$f")"
  [ -e "$mark" ] && continue
  dpkg -x "$f" "$root" && touch "$mark" && unpacked=1
done
if [ -n "$unpacked" ]; then
  for f in "$pc"/*.pc; do sed -i "s|^prefix=.*|prefix=$root/usr|" "$f"; done
fi
unset unpacked
export PKG_CONFIG_PATH="$pc${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
export LD_LIBRARY_PATH="$root/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
