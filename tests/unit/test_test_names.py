"""Test modules have unique names: the test folders are not packages, so pytest imports each
file by its basename, and two files of one name break the collection of the whole suite (a
run of one folder, as test-fast is, does not show it)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_no_two_test_modules_share_a_name() -> None:
    names = Counter(path.name for path in TESTS.rglob("test_*.py"))
    assert [name for name, count in names.items() if count > 1] == []
