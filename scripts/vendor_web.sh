#!/usr/bin/env bash
# Vendor the browser assets the leader serves into the package, from npm at build time (pinned, integrity-checked
# by npm): nothing is fetched when the leader runs, so /docs works in an air-gapped cluster.
set -euo pipefail
cd "$(dirname "$0")/.."

SWAGGER_UI_VERSION=5.35.0
dest=leader/web/static/vendor/swagger-ui
if [ -f "$dest/VERSION" ] && [ "$(cat "$dest/VERSION")" = "$SWAGGER_UI_VERSION" ]; then
    exit 0
fi
command -v npm >/dev/null 2>&1 || { echo "vendor_web: npm is needed (apt-get install npm)" >&2; exit 1; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
echo "vendor_web: swagger-ui-dist@$SWAGGER_UI_VERSION from npm"
(cd "$tmp" && npm pack --silent "swagger-ui-dist@$SWAGGER_UI_VERSION" >/dev/null)
tar -xzf "$tmp"/swagger-ui-dist-*.tgz -C "$tmp"
mkdir -p "$dest"
cp "$tmp/package/swagger-ui-bundle.js" "$tmp/package/swagger-ui.css" "$tmp/package/LICENSE" "$dest/"
echo "$SWAGGER_UI_VERSION" > "$dest/VERSION"
