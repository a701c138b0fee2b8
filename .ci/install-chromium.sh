#!/usr/bin/env bash
# Install Debian's chromium for the HTML report test (tests/test_html_report.py renders the page
# in headless Chromium; without /usr/bin/chromium that test skips).
# Idempotent and quiet: exits 0 at once when chromium is already there; uses sudo when not root.
set -euo pipefail

if [ -x /usr/bin/chromium ]; then
    exit 0
fi
sudo_=""
[ "$(id -u)" -ne 0 ] && sudo_="sudo"
export DEBIAN_FRONTEND=noninteractive
echo "install-chromium: installing chromium with apt" >&2
$sudo_ apt-get update -qq >/dev/null
$sudo_ apt-get install -y -qq chromium >/dev/null
[ -x /usr/bin/chromium ] || { echo "install-chromium: /usr/bin/chromium missing after install" >&2; exit 1; }
