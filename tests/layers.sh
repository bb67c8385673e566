#!/bin/sh
# The layering rule (docs/architecture.md): tools/check-layers passes on the tree, and
# fails on a copy where a low layer includes a high one.
set -u
top=${top_srcdir:-$(cd "$(dirname "$0")/.." && pwd)}
"$top/tools/check-layers" "$top" || exit 1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/src/core" "$tmp/src/device" "$tmp/include/libra"
cp "$top/src/device/device.c" "$tmp/src/device/"
printf '#include "libra/device.h"\n' > "$tmp/src/core/bad.c"
printf '#include "libra/log.h"\n' > "$tmp/include/libra/device.h"
if "$top/tools/check-layers" "$tmp" > "$tmp/out" 2>&1; then
    echo "layers: a core file including libra/device.h was not caught"
    exit 1
fi
grep -q "src/core/bad.c (core) includes libra/device.h (device)" "$tmp/out" || {
    cat "$tmp/out"
    exit 1
}
echo "layers: OK (a violation is reported)"
