#!/usr/bin/env bash
# Renders a txnsim HTML page in headless Chromium and saves a PNG.
#
#   scripts/screenshot.sh PAGE.html OUT.png [STEP] [WIDTHxHEIGHT]
#
# STEP is the step to show: a number (0 is the first op), `last` (the default), or `S:N` for step N of
# the S-th scenario when the page holds several. The page reads it from its URL fragment
# (`page.html#last`), so the picture is of a chosen step without a click. Needs Chromium and a CJK
# font (scripts/browser-packages.txt; run as root, the script installs them), or set CHROMIUM to another
# Chrome binary. Nothing is fetched from the network: the page is self-contained.
#
# The README's picture is made with:
#   cargo run --release -- scenario --show --html target/seed.html seeds/scenarios/seed_experiment.json
#   scripts/screenshot.sh target/seed.html docs/img/seed_experiment.png last 1180x700
#   scripts/screenshot.sh target/seed.html docs/img/seed_experiment_open.png 2 1180x700
set -euo pipefail

if [ $# -lt 2 ]; then
    awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
    exit 2
fi
page=$1
out=$2
step=${3:-last}
size=${4:-1180x700}
[ -f "$page" ] || { echo "error: no page at $page" >&2; exit 2; }

chromium=${CHROMIUM:-}
if [ -z "$chromium" ]; then
    for c in chromium chromium-browser google-chrome; do
        if command -v "$c" > /dev/null; then chromium=$c; break; fi
    done
fi
# Debian's Chromium and the CJK font the pages name (the seed article's title is Chinese), pinned in
# scripts/browser-packages.txt, installed when missing if we may.
packages=$(grep -v '^#' "$(dirname "$0")/browser-packages.txt")
if [ -z "$chromium" ] || ! fc-list :lang=zh | grep -q .; then
    if [ "$(id -u)" = 0 ]; then
        echo "installing $packages" >&2
        # shellcheck disable=SC2086
        apt-get install -y --no-install-recommends -o DPkg::Lock::Timeout=600 $packages > /dev/null \
            || { echo "error: apt-get install $packages failed" >&2; exit 2; }
        [ -n "$chromium" ] || chromium=chromium
    fi
fi
[ -n "$chromium" ] || { echo "error: no Chromium found; apt-get install -y" $packages ", or set CHROMIUM" >&2; exit 2; }

url="file://$(cd "$(dirname "$page")" && pwd)/$(basename "$page")#$step"
# A throwaway profile, so a running browser or a stale lock cannot interfere; --no-sandbox because
# containers (and CI runners as root) have no user namespaces for Chromium's sandbox.
profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
"$chromium" --headless --no-sandbox --disable-gpu --hide-scrollbars --user-data-dir="$profile" \
    --disable-quic --no-first-run --disable-background-networking --disable-component-update --disable-sync \
    --window-size="${size/x/,}" --screenshot="$out" "$url" 2> "$profile/chromium.log" \
    || { cat "$profile/chromium.log" >&2; exit 1; }
[ -s "$out" ] || { echo "error: Chromium wrote no screenshot" >&2; cat "$profile/chromium.log" >&2; exit 1; }
echo "wrote $out"
