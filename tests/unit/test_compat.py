"""The tested celery/kombu/billiard range: read, checked, and declared the same everywhere."""

from __future__ import annotations

import tomllib
from importlib import metadata

import pytest
from packaging.requirements import Requirement

from hookline.transport import compat
from tests.conftest import ROOT

IN_RANGE = {"celery": "5.6.0", "kombu": "5.7.0", "billiard": "4.2.1"}


@pytest.mark.parametrize(("text", "expected"), [
    ("5.6.0", (5, 6, 0)),
    ("5.7", (5, 7)),
    ("5.7.0rc1", (5, 7, 0)),
    ("5.8.0b2", (5, 8, 0)),
    ("4.2.1.post1", (4, 2, 1)),
    ("5.6.0.dev3", (5, 6, 0)),
    ("10.0.12", (10, 0, 12)),
    ("", ()),
    ("abc", ()),
])
def test_version_tuple_keeps_the_leading_numbers(text, expected):
    assert compat.version_tuple(text) == expected


def test_versions_inside_the_range_have_no_problems():
    assert compat.problems(IN_RANGE) == []
    assert compat.problems({"celery": "5.7.9", "kombu": "5.6.0", "billiard": "4.99"}) == []


@pytest.mark.parametrize(("name", "version"), [
    ("kombu", "5.5.0"),      # below
    ("kombu", "5.8.0"),      # the first version beyond
    ("celery", "5.5.3"),
    ("celery", "6.0.0"),
    ("billiard", "4.2.0"),
    ("billiard", "5.0.0"),
])
def test_a_version_outside_the_range_is_named_with_the_range(name, version):
    lowest, beyond = compat.SUPPORTED[name]
    spelt = (".".join(map(str, lowest)), ".".join(map(str, beyond)))
    [problem] = compat.problems({**IN_RANGE, name: version})
    assert problem == (f"{name} {version} is outside the tested range "
                       f">={spelt[0]},<{spelt[1]}")


def test_a_pre_release_of_the_next_minor_is_outside_and_of_the_lowest_is_inside():
    assert compat.problems({**IN_RANGE, "kombu": "5.8.0rc1"})
    assert compat.problems({**IN_RANGE, "kombu": "5.6.0rc1"}) == []  # reads as 5.6.0


def test_a_missing_distribution_is_said_so():
    installed = dict(IN_RANGE)
    del installed["billiard"]
    assert compat.problems(installed) == ["billiard is not installed"]


def test_the_installed_versions_and_every_overridden_name_pass():
    """This virtualenv's versions (make test-compat runs this at both ends of the range)."""
    assert compat.problems() == []


def test_a_vanished_name_is_reported(monkeypatch):
    monkeypatch.setitem(compat.REQUIRED_NAMES, "kombu.transport.redis:Channel",
                        ("_put", "_renamed_in_kombu_9"))
    [problem] = compat.problems()
    assert "kombu.transport.redis.Channel._renamed_in_kombu_9" in problem
    assert "kombu.transport.redis.Channel._put" not in problem


def test_require_supported_says_what_is_wrong_and_what_to_do(monkeypatch):
    real = metadata.version
    monkeypatch.setattr(metadata, "version",
                        lambda name: "5.5.0" if name == "kombu" else real(name))
    with pytest.raises(compat.UnsupportedVersion) as raised:
        compat.require_supported()
    message = str(raised.value)
    assert "kombu 5.5.0 is outside the tested range >=5.6.0,<5.8" in message
    assert "pyproject.toml" in message


def test_pyproject_declares_the_range_the_worker_checks():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = {}
    for line in project["dependencies"]:
        requirement = Requirement(line)
        if requirement.name in compat.SUPPORTED:
            declared[requirement.name] = {str(spec) for spec in requirement.specifier}
    expected = {
        name: {">=" + ".".join(map(str, lowest)), "<" + ".".join(map(str, beyond))}
        for name, (lowest, beyond) in compat.SUPPORTED.items()
    }
    assert declared == expected
