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
# shellcheck source=apt-install.sh
source "$(dirname "${BASH_SOURCE[0]}")/apt-install.sh"

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
apt_install Chromium hookline-ensure-chromium
installed || give_up "apt-get finished but $CHROMIUM or $DRIVER is still missing"
say "installed $("$CHROMIUM" --version 2>/dev/null | head -n 1)"
