# Sourced by scripts/ensure-*.sh: install Debian packages with apt-get, as root directly,
# else through sudo when it works without a password. The sourcing script defines
# `say MESSAGE` and `give_up REASON` (which exits), and sets PACKAGES.
#
#   apt_install WHAT LOG_NAME     WHAT names what is missing in the messages ("Chromium");
#                                 the apt-get output goes to ${TMPDIR:-/tmp}/LOG_NAME.log

apt_install() {
    local what=$1 log="${TMPDIR:-/tmp}/$2.log"
    command -v apt-get >/dev/null || give_up "$what is missing and there is no apt-get here"
    local as_root=()
    if [[ $(id -u) -ne 0 ]]; then
        if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
            as_root=(sudo -n)
        else
            give_up "$what is missing and installing it needs root (no password-less sudo)"
        fi
    fi
    say "installing ${PACKAGES[*]} with apt-get (once; later runs find it)"
    export DEBIAN_FRONTEND=noninteractive
    # A stale package list may name versions the mirror no longer has: update first.
    if ! { "${as_root[@]}" apt-get update -q &&
           "${as_root[@]}" apt-get install -y -q --no-install-recommends "${PACKAGES[@]}"; } \
            >"$log" 2>&1; then
        tail -n 15 "$log" >&2
        give_up "apt-get could not install ${PACKAGES[*]} (its log: $log)"
    fi
}
