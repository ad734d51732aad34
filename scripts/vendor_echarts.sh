#!/usr/bin/env bash
# Vendors Apache ECharts, the explorer's charting library, into crates/serve/assets/vendor:
# its built file and its licence, from the npm registry at a pinned version, checked
# against the registry's integrity hash. `posenc serve` embeds them, so the page works
# offline and users need no build step. Rerun after changing VERSION.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=5.6.0
dest=crates/serve/assets/vendor
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "echarts@$VERSION" >/dev/null)
want=$(npm view "echarts@$VERSION" dist.integrity)
got="sha512-$(openssl dgst -sha512 -binary "$tmp/echarts-$VERSION.tgz" | base64 -w0)"
[ "$want" = "$got" ] || { echo "integrity mismatch: $got, want $want" >&2; exit 1; }
tar -xzf "$tmp/echarts-$VERSION.tgz" -C "$tmp"
mkdir -p "$dest"
cp "$tmp/package/dist/echarts.min.js" "$dest/echarts.min.js"
cp "$tmp/package/LICENSE" "$dest/LICENSE-echarts"
echo "echarts $VERSION ($want) in $dest"
