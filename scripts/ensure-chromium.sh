#!/usr/bin/env bash
# Make sure Debian's Chromium and its ChromeDriver are installed, for the browser tests
# (tests/browser/), which drive /usr/bin/chromium through /usr/bin/chromedriver.
#
# 1. Both are there: say so and exit 0.
# 2. Otherwise, on a machine with apt-get: install the packages chromium and chromium-driver,
#    as root directly, else through sudo when it works without a password.
# 3. Otherwise: say why and how, and still exit 0. A missing browser is not a failed run: the
#    browser tests then skip, each saying why (tests/browser/conftest.py).
#
# Set HOOKLINE_NO_BROWSER_INSTALL=1 to never install anything (only report).
set -uo pipefail

CHROMIUM=${HOOKLINE_CHROMIUM:-/usr/bin/chromium}
DRIVER=${HOOKLINE_CHROMEDRIVER:-/usr/bin/chromedriver}
PACKAGES=(chromium chromium-driver)

say() { echo "ensure-chromium: $*"; }

installed() { [[ -x $CHROMIUM && -x $DRIVER ]]; }

give_up() {
    say "$1; the browser tests will skip."
    say "to run them: install Debian's ${PACKAGES[*]} (apt-get install -y ${PACKAGES[*]}),"
    say "or point HOOKLINE_CHROMIUM and HOOKLINE_CHROMEDRIVER at a Chromium and its driver."
    exit 0
}

if installed; then
    say "using $("$CHROMIUM" --version 2>/dev/null | head -n 1) and" \
        "$("$DRIVER" --version 2>/dev/null | head -n 1 | cut -d' ' -f1-2)"
    exit 0
fi
[[ ${HOOKLINE_NO_BROWSER_INSTALL:-} == 1 ]] && give_up "Chromium is missing and HOOKLINE_NO_BROWSER_INSTALL=1"
command -v apt-get >/dev/null || give_up "Chromium is missing and there is no apt-get here"

as_root=()
if [[ $(id -u) -ne 0 ]]; then
    if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
        as_root=(sudo -n)
    else
        give_up "Chromium is missing and installing it needs root (no password-less sudo)"
    fi
fi

say "installing ${PACKAGES[*]} with apt-get (once; later runs find them)"
log="${TMPDIR:-/tmp}/hookline-ensure-chromium.log"
export DEBIAN_FRONTEND=noninteractive
# A stale package list may name versions the mirror no longer has: update first.
if ! { "${as_root[@]}" apt-get update -q &&
       "${as_root[@]}" apt-get install -y -q --no-install-recommends "${PACKAGES[@]}"; } \
        >"$log" 2>&1; then
    tail -n 15 "$log" >&2
    give_up "apt-get could not install ${PACKAGES[*]} (its log: $log)"
fi
installed || give_up "apt-get finished but $CHROMIUM or $DRIVER is still missing"
say "installed $("$CHROMIUM" --version 2>/dev/null | head -n 1)"
