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
# shellcheck source=apt-install.sh
source "$(dirname "${BASH_SOURCE[0]}")/apt-install.sh"

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
apt_install Prometheus hookline-ensure-prometheus
installed || give_up "apt-get finished but $PROMETHEUS or $PROMTOOL is still missing"
say "installed $("$PROMETHEUS" --version 2>&1 | head -n 1)"
