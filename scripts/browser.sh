#!/usr/bin/env bash
# Make sure Debian's Chromium (for the dashboard's browser test, driven by Playwright: no browser download) and
# openssl (the HTTPS test's certificate) are installed; print Chromium's path. Installs them when missing and we
# are root; exits non-zero, saying why, otherwise.
set -euo pipefail
if ! command -v chromium >/dev/null || ! command -v openssl >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "browser.sh: installing chromium and openssl" >&2
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium openssl >/dev/null
  else
    echo "browser.sh: chromium or openssl is missing (as root: apt-get install chromium openssl)" >&2
    exit 1
  fi
fi
command -v chromium
