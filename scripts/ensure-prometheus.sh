#!/usr/bin/env bash
# Make sure Debian's Prometheus (the server and promtool) is installed, for the tests of the
# shipped alert rules and dashboard (tests/unit/test_alert_rules.py runs `promtool check rules`
# and `promtool test rules`; tests/integration/test_prometheus.py starts a real `prometheus`
# on a free loopback port against a real worker and `hookline metrics`).
#
# 1. Both are there: say so and exit 0.
# 2. Otherwise, on a machine with apt-get: install the package prometheus (no recommends), as
#    root directly, else through sudo when it works without a password. On a machine whose
#    init is systemd the package starts its own service on :9090; the tests never use it.
# 3. Otherwise: say why and how, and still exit 0. A missing Prometheus is not a failed run:
#    those tests then skip, each saying why (tests/support/prometheus.py).
#
# Set HOOKLINE_NO_PROMETHEUS_INSTALL=1 to never install anything (only report).
set -uo pipefail

PROMETHEUS=${HOOKLINE_PROMETHEUS:-/usr/bin/prometheus}
PROMTOOL=${HOOKLINE_PROMTOOL:-/usr/bin/promtool}
PACKAGES=(prometheus)

say() { echo "ensure-prometheus: $*"; }

installed() { [[ -x $PROMETHEUS && -x $PROMTOOL ]]; }

give_up() {
    say "$1; the alert-rule and dashboard tests will skip."
    say "to run them: install Debian's ${PACKAGES[*]} (apt-get install -y ${PACKAGES[*]}),"
    say "or point HOOKLINE_PROMETHEUS and HOOKLINE_PROMTOOL at a prometheus and its promtool."
    exit 0
}

if installed; then
    say "using $("$PROMETHEUS" --version 2>&1 | head -n 1)"
    exit 0
fi
[[ ${HOOKLINE_NO_PROMETHEUS_INSTALL:-} == 1 ]] &&
    give_up "Prometheus is missing and HOOKLINE_NO_PROMETHEUS_INSTALL=1"
command -v apt-get >/dev/null || give_up "Prometheus is missing and there is no apt-get here"

as_root=()
if [[ $(id -u) -ne 0 ]]; then
    if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
        as_root=(sudo -n)
    else
        give_up "Prometheus is missing and installing it needs root (no password-less sudo)"
    fi
fi

say "installing ${PACKAGES[*]} with apt-get (once; later runs find it)"
log="${TMPDIR:-/tmp}/hookline-ensure-prometheus.log"
export DEBIAN_FRONTEND=noninteractive
# A stale package list may name versions the mirror no longer has: update first.
if ! { "${as_root[@]}" apt-get update -q &&
       "${as_root[@]}" apt-get install -y -q --no-install-recommends "${PACKAGES[@]}"; } \
        >"$log" 2>&1; then
    tail -n 15 "$log" >&2
    give_up "apt-get could not install ${PACKAGES[*]} (its log: $log)"
fi
installed || give_up "apt-get finished but $PROMETHEUS or $PROMTOOL is still missing"
say "installed $("$PROMETHEUS" --version 2>&1 | head -n 1)"
