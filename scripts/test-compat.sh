#!/usr/bin/env bash
# The broker, crash, held-endpoint, Flower and task-event tests at each end of the celery/kombu/billiard range
# Hookline declares (pyproject.toml) and checks at worker start (hookline/transport/compat.py),
# and the Django tests at each end of the django extra's range.
#
#   scripts/test-compat.sh [lowest|newest|all]      (make test-compat COMPAT=...)
#
# lowest: the range's lower bounds, read from compat.SUPPORTED (so the pins, the worker's check
#         and pyproject.toml cannot drift apart; tests/unit/test_compat.py checks the latter),
#         and Django at the django extra's floor in pyproject.toml (django>=4.2: the latest
#         4.2.x, pinned as django==4.2.*).
# newest: whatever pip resolves today within pyproject.toml's range.
# Each end gets a throwaway virtualenv in .compat/<end> (made afresh each run; pip's cache
# makes that quick), `pip install -e '.[dev]'` with the end's pins as constraints, then
# pytest with that virtualenv's python: the tests start workers with `sys.executable -m
# celery`, so the workers run those versions too. Exits non-zero if any end fails.
#
# Environment: PYTHON (default python3), COMPAT_DIR (default .compat), PYTEST_ARGS, and the
# tests' HOOKLINE_TEST_REDIS_URL.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
WHICH=${1:-all}
PYTHON=${PYTHON:-python3}
BASE=${COMPAT_DIR:-$ROOT/.compat}
TESTS=(tests/store/test_broker.py tests/faults/test_crashes.py tests/integration/test_held.py
       tests/integration/test_flower.py tests/integration/test_task_events.py
       tests/unit/test_worker_task_events.py
       # Django: the example project, the console mounted in it (and without its extra), the
       # outbox's web path, and a fresh project built as docs/guides/django.md says.
       tests/integration/test_django_example.py tests/integration/test_console_django.py
       tests/integration/test_console_extra.py tests/integration/test_outbox_web_path.py
       tests/integration/test_guides.py
       # The publishing app (its backend found without Celery's entry-point scan).
       tests/store/test_publisher.py)
DISTS=(celery kombu billiard django)

say() { echo "test-compat: $*"; }

lowest_pins() {
    "$PYTHON" - <<'PY'
import ast
from pathlib import Path

tree = ast.parse(Path("hookline/transport/compat.py").read_text())
for node in tree.body:
    target = node.target if isinstance(node, ast.AnnAssign) else (
        node.targets[0] if isinstance(node, ast.Assign) else None)
    if isinstance(target, ast.Name) and target.id == "SUPPORTED":
        for name, (lowest, _beyond) in ast.literal_eval(node.value).items():
            print(f"{name}=={'.'.join(map(str, lowest))}")

# Django at the django extra's floor, in its latest patch release (4.2 -> django==4.2.*).
import re
import tomllib

extras = tomllib.loads(Path("pyproject.toml").read_text())["project"]["optional-dependencies"]
(floor,) = [m[1] for r in extras["django"] if (m := re.fullmatch(r"django\s*>=\s*([\d.]+)", r))]
print(f"django=={floor}.*" if floor.count(".") == 1 else f"django=={floor}")
PY
}

run_end() {
    local end=$1 venv="$BASE/$1" started=$SECONDS
    say "== $end: fresh virtualenv in $venv"
    # Called as `run_end ... || failed=1`, where set -e does not apply: each step says so.
    rm -rf "$venv" && mkdir -p "$BASE" && "$PYTHON" -m venv "$venv" || return
    local constraints="$venv/constraints.txt"
    case $end in
        lowest) lowest_pins >"$constraints" && [[ -s $constraints ]] || return ;;
        newest) : >"$constraints" ;;  # pyproject.toml's range alone: pip takes the newest
        *) echo "test-compat: unknown end '$end' (lowest, newest or all)" >&2; return 2 ;;
    esac
    if [[ -s $constraints ]]; then say "$end pins: $(tr '\n' ' ' <"$constraints")"; fi
    "$venv/bin/python" -m pip install --quiet -c "$constraints" -e '.[dev]' || {
        say "$end: cannot install these versions together"; return 1; }
    local versions
    versions=$("$venv/bin/python" - "${DISTS[@]}" <<'PY'
import sys
from importlib.metadata import version
print(" ".join(f"{name}=={version(name)}" for name in sys.argv[1:]))
PY
) || return
    say "$end installed: $versions (installed in $((SECONDS - started)) s)"
    # The worker's own start-up check must accept what was installed.
    "$venv/bin/python" -c 'from hookline.transport import compat; import sys; p = compat.problems(); \
print(*p, sep="\n", file=sys.stderr); sys.exit(bool(p))' || {
        say "$end: hookline.transport.compat refuses these versions"; return 1; }
    local status=0
    # shellcheck disable=SC2086  # PYTEST_ARGS is a list of words
    "$venv/bin/python" -m pytest "${TESTS[@]}" ${PYTEST_ARGS:-} || status=$?
    say "$end ($versions): $([[ $status == 0 ]] && echo passed || echo "FAILED ($status)")" \
        "in $((SECONDS - started)) s"
    RESULTS+=("$end: $versions: $([[ $status == 0 ]] && echo passed || echo FAILED)")
    return "$status"
}

case $WHICH in
    all) ENDS=(lowest newest) ;;
    lowest | newest) ENDS=("$WHICH") ;;
    *) echo "usage: $0 [lowest|newest|all]" >&2; exit 2 ;;
esac

RESULTS=()
failed=0
for end in "${ENDS[@]}"; do
    run_end "$end" || failed=1
done
say "summary:"
printf '    %s\n' "${RESULTS[@]}"
exit "$failed"
