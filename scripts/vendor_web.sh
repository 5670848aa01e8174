#!/usr/bin/env bash
# Vendor the browser assets the leader serves into the package, from npm at build time (pinned, integrity-checked
# by npm): nothing is fetched when the leader runs, so /docs and the charts work in an air-gapped cluster and the
# HTML report (which inlines the chart library) opens offline.
set -euo pipefail
cd "$(dirname "$0")/.."

SWAGGER_UI_VERSION=5.35.0
UPLOT_VERSION=1.6.32
vendor=leader/web/static/vendor

# vendor PACKAGE VERSION DIR FILE...: copy FILEs (paths inside the npm package) into $vendor/DIR, once per version.
vendor() {
    local package=$1 version=$2 dest=$vendor/$3
    shift 3
    if [ -f "$dest/VERSION" ] && [ "$(cat "$dest/VERSION")" = "$version" ]; then
        return 0
    fi
    command -v npm >/dev/null 2>&1 || { echo "vendor_web: npm is needed (apt-get install npm)" >&2; return 1; }
    local tmp
    tmp="$(mktemp -d)"
    echo "vendor_web: $package@$version from npm"
    (cd "$tmp" && npm pack --silent "$package@$version" >/dev/null)
    tar -xzf "$tmp"/*.tgz -C "$tmp"
    mkdir -p "$dest"
    for file in "$@" LICENSE; do
        cp "$tmp/package/$file" "$dest/"
    done
    echo "$version" > "$dest/VERSION"
    rm -rf "$tmp"
}

vendor swagger-ui-dist "$SWAGGER_UI_VERSION" swagger-ui swagger-ui-bundle.js swagger-ui.css
vendor uplot "$UPLOT_VERSION" uplot dist/uPlot.iife.min.js dist/uPlot.min.css
