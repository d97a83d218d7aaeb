"""Portal links on a real Redis: a link is signed, scoped to one existing application, expires,
and can be revoked one by one or all of an application's at once; a tampered token is refused
before anything in it is believed; no key, no link (one error naming the variable); the token
never shows in a repr, an audit entry or the CLI's messages."""

from __future__ import annotations

import base64
import json
from urllib.parse import parse_qs, unquote, urlsplit

import pytest
from click.testing import CliRunner

import hookline
from hookline.cli.main import main
from hookline.service import audit, portal
from hookline.service.actor import Actor, NotFound
from hookline.store.apps import AppRegistry, UnknownApplication

KEY = "k" * 40
BASE = "https://hooks.example.com/portal"
OPERATOR = Actor(name="alice", session="s-1")


@pytest.fixture
def apps(quiet_redis, monkeypatch):
    monkeypatch.setenv("HOOKLINE_CONSOLE_SECRET_KEY", KEY)
    monkeypatch.setenv("HOOKLINE_PORTAL_URL", BASE)
    AppRegistry().add("app-a")
    AppRegistry().add("app-b")
    return quiet_redis


def token_of(url: str) -> str:
    return parse_qs(urlsplit(url).query)["token"][0]


def test_a_link_grants_its_application_until_it_expires(apps):
    url = hookline.portal_link("app-a", ttl=600)
    assert url.startswith(f"{BASE}/enter?token=hlp1.")
    grant = portal.verify(token_of(url))
    assert (grant.app_id, grant.read_only) == ("app-a", False)
    assert 599 <= grant.expires_at - grant.issued_at <= 601
    actor = grant.actor()
    assert (actor.name, actor.app_scope, actor.can_act) == ("portal:app-a", "app-a", True)
    assert actor.session == f"portal:{grant.link_id}"
    assert portal.verify(token_of(portal.portal_link("app-a", read_only=True))).actor().can_act \
        is False
    with pytest.raises(portal.TokenRefused, match=r"\(expired\)"):
        portal.verify(token_of(url), now=grant.expires_at)


def test_the_base_url_can_be_given(apps):
    assert portal.portal_link("app-a", base_url="http://127.0.0.1:8091/p/").startswith(
        "http://127.0.0.1:8091/p/enter?token=")


def test_a_tampered_token_is_refused(apps):
    token = token_of(portal.portal_link("app-a"))
    prefix, payload, signature = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    other = base64.urlsafe_b64encode(json.dumps({**claims, "app": "app-b"}).encode())
    forged = [f"{prefix}.{other.decode().rstrip('=')}.{signature}",
              f"{prefix}.{payload}.{signature[:-2]}{'AA' if signature[-2:] != 'AA' else 'BB'}",
              f"{prefix}.{payload}.", "hlp1..", "nonsense", "", token + "x"]
    for bad in forged:
        with pytest.raises(portal.TokenRefused) as refused:
            portal.verify(bad)
        assert refused.value.reason in ("malformed", "altered")
        assert bad not in str(refused.value) or bad == ""
    with pytest.raises(portal.TokenRefused, match=r"\(altered\)"):
        portal.verify(token, key=b"another-key-of-at-least-32-characters")


def test_revoking_a_link_refuses_it_and_no_other(apps):
    first, second = (portal.issue("app-a") for _ in range(2))
    portal.revoke(first.link_id, actor=OPERATOR)
    with pytest.raises(portal.TokenRefused, match=r"\(revoked\)"):
        portal.verify(token_of(first.url))
    assert portal.verify(token_of(second.url)).link_id == second.link_id
    with pytest.raises(portal.PortalUnavailable, match="not a portal link id"):
        portal.revoke("../../etc")


def test_revoking_an_application_refuses_its_earlier_links_only(apps):
    earlier, other = portal.issue("app-a"), portal.issue("app-b")
    portal.revoke_app("app-a", actor=OPERATOR)
    later = portal.issue("app-a")
    with pytest.raises(portal.TokenRefused, match=r"\(revoked\)"):
        portal.verify(token_of(earlier.url))
    assert portal.verify(token_of(later.url)).app_id == "app-a"
    assert portal.verify(token_of(other.url)).app_id == "app-b"


def test_no_link_without_the_key_the_address_or_the_application(apps, monkeypatch):
    with pytest.raises(UnknownApplication):
        portal.portal_link("app-z")
    with pytest.raises(portal.PortalUnavailable, match="between 60 seconds and 30 days"):
        portal.portal_link("app-a", ttl=90 * 86400)
    monkeypatch.setenv("HOOKLINE_CONSOLE_SECRET_KEY", "short")
    with pytest.raises(portal.PortalUnavailable, match="HOOKLINE_CONSOLE_SECRET_KEY must be"):
        portal.portal_link("app-a")
    monkeypatch.delenv("HOOKLINE_CONSOLE_SECRET_KEY")
    with pytest.raises(portal.PortalUnavailable, match=r"^portal links need "
                                                       r"HOOKLINE_CONSOLE_SECRET_KEY"):
        portal.portal_link("app-a")
    monkeypatch.setenv("HOOKLINE_CONSOLE_SECRET_KEY", KEY)
    monkeypatch.delenv("HOOKLINE_PORTAL_URL")
    with pytest.raises(portal.PortalUnavailable, match="HOOKLINE_PORTAL_URL"):
        portal.portal_link("app-a")
    with pytest.raises(portal.PortalUnavailable, match="http"):
        portal.portal_link("app-a", base_url="javascript:alert(1)")


def test_the_token_is_in_no_repr_and_no_audit_entry(apps):
    made = portal.issue("app-a", actor=OPERATOR)
    portal.revoke(made.link_id, actor=OPERATOR)
    token = token_of(made.url)
    assert token not in repr(made)
    entries = audit.recent(OPERATOR).items
    assert {entry.action for entry in entries} == {"portal.link", "portal.revoke"}
    assert all(token not in repr(entry) and made.link_id in repr(entry) for entry in entries)


def test_the_cli_prints_a_link_and_revokes(apps):
    runner = CliRunner()
    made = runner.invoke(main, ["portal", "link", "app-a", "--ttl", "2h", "--read-only"])
    assert made.exit_code == 0, made.output
    url = made.stdout.strip()
    grant = portal.verify(unquote(token_of(url)))
    assert grant.read_only and 7199 <= grant.expires_at - grant.issued_at <= 7201
    assert f"link id {grant.link_id}" in made.stderr
    revoked = runner.invoke(main, ["portal", "revoke", grant.link_id])
    assert revoked.exit_code == 0, revoked.output
    with pytest.raises(portal.TokenRefused, match="revoked"):
        portal.verify(token_of(url))
    assert runner.invoke(main, ["portal", "revoke", "--app", "app-b"]).exit_code == 0
    assert runner.invoke(main, ["portal", "revoke"]).exit_code == 2
    assert runner.invoke(main, ["portal", "link", "app-a", "--ttl", "soon"]).exit_code == 2


def test_the_cli_says_which_variable_is_missing(apps, monkeypatch):
    monkeypatch.delenv("HOOKLINE_CONSOLE_SECRET_KEY")
    answer = CliRunner().invoke(main, ["portal", "link", "app-a"])
    assert answer.exit_code == 1
    assert answer.output.count("\n") == 1 and "HOOKLINE_CONSOLE_SECRET_KEY" in answer.output


def test_revoking_an_unknown_application_is_refused_unless_it_was_removed(apps):
    with pytest.raises(NotFound, match="no application 'app-z'"):
        portal.revoke_app("app-z", actor=OPERATOR)
    assert CliRunner().invoke(main, ["portal", "revoke", "--app", "app-z"]).output == (
        "Error: no application 'app-z'\n")
    AppRegistry().add("app-z")
    before_removal = portal.issue("app-z")
    AppRegistry().remove("app-z")
    result = CliRunner().invoke(main, ["portal", "revoke", "--app", "app-z", "--removed"])
    assert result.exit_code == 0, result.output
    AppRegistry().add("app-z")  # the id again: its earlier links stay refused
    with pytest.raises(portal.TokenRefused, match=r"\(revoked\)"):
        portal.verify(token_of(before_removal.url))
