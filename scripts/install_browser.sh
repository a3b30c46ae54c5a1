#!/usr/bin/env bash
# Debian's chromium for the browser tests (tests/browser; playwright drives it, it
# downloads no browser of its own).  Installs it with apt-get when missing and this
# user may (root, or password-less sudo).  Under CI (CI=true) a browser that cannot
# be installed is an error; elsewhere the browser tests skip and say why.
set -uo pipefail
chromium="${INDEXER_LAB_CHROMIUM:-/usr/bin/chromium}"
if [ -x "$chromium" ]; then
    exit 0
fi
if [ "$(id -u)" -eq 0 ]; then
    sudo=""
elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
    sudo="sudo -n"
else
    sudo="none"
fi
if [ "$sudo" != "none" ] && command -v apt-get >/dev/null; then
    echo "installing chromium (apt-get) for the browser tests" >&2
    $sudo apt-get update -qq && \
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium >/dev/null
fi
if [ -x "$chromium" ]; then
    exit 0
fi
case "${CI:-}" in
    1|true|TRUE|True|yes)
        echo "install_browser: no chromium at $chromium and it could not be installed (CI=true)" >&2
        exit 1 ;;
esac
echo "install_browser: no chromium at $chromium (apt-get install chromium as root): the browser tests will skip" >&2
exit 0
