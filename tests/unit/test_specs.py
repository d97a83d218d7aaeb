"""The typed argument sets (hookline.core.specs): the CLI's endpoint options are an
EndpointSpec's settings by name, and what an update names as changed comes in one order."""

from __future__ import annotations

import click

from hookline.cli.endpoint import endpoint_add, endpoint_update
from hookline.core.endpoint_validation import checked_settings
from hookline.core.specs import EndpointSpec, given_settings

#: The options of add and update that are not an endpoint's settings.
OWN_OPTIONS = {"endpoint_id", "url", "signature"}


def test_the_endpoint_commands_options_are_the_specs_settings() -> None:
    settings = set(EndpointSpec.__annotations__)
    for command in (endpoint_add, endpoint_update):
        assert isinstance(command, click.Command)
        names = {param.name for param in command.params} - OWN_OPTIONS
        assert names <= settings, names - settings
    update_names = {param.name for param in endpoint_update.params} - OWN_OPTIONS
    assert update_names == settings


def test_given_settings_come_in_the_declared_order_first_ones_first() -> None:
    spec = EndpointSpec(trace_context=False, rate="5/s", headers={}, remove_headers=(),
                        secret="whsec_x", event_types="none")
    assert given_settings(spec, url="https://example.com/hook") == [
        "url", "secret", "rate", "event_types", "trace_context"]
    assert given_settings(EndpointSpec(), url=None) == []


def test_checked_settings_check_only_what_was_given() -> None:
    assert checked_settings(EndpointSpec(rate="none", ordered=False, timeout=None)) == {
        "rate": None, "ordered": False}
