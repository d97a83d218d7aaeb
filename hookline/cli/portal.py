"""``hookline portal``: links that open the tenant portal for one application, and their
revocation (``hookline.service.portal``).

``hookline portal link APP`` prints the URL to hand to the application's owner (it holds the
token: send it to them, nowhere else) and, on standard error, the link id that revokes it.
"""

from __future__ import annotations

import click

from hookline.core.times import parse_age
from hookline.service import portal
from hookline.service.actor import cli_actor


def _ttl(value: str) -> float:
    try:
        return parse_age(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="'--ttl'") from None


@click.group("portal")
def portal_group() -> None:
    """Tenant portal links (HOOKLINE_PORTAL_URL, HOOKLINE_CONSOLE_SECRET_KEY)."""


@portal_group.command("link")
@click.argument("app_id", metavar="APP")
@click.option("--ttl", default="1h", show_default=True,
              help="How long the link works: seconds, or e.g. 30m, 12h, 7d (at most 30d).")
@click.option("--read-only", is_flag=True, help="The tenant may look but not act.")
@click.option("--base-url", default=None,
              help="Where the portal is served (default: HOOKLINE_PORTAL_URL).")
def link_command(app_id: str, ttl: str, read_only: bool, base_url: str | None) -> None:
    """Print a signed, expiring link to APP's portal."""
    made = portal.issue(app_id, ttl=_ttl(ttl), read_only=read_only, base_url=base_url,
                        actor=cli_actor())
    click.echo(made.url)
    click.echo(f"link id {made.link_id} (revoke it with 'hookline portal revoke "
               f"{made.link_id}')", err=True)


@portal_group.command("revoke")
@click.argument("link_id", required=False)
@click.option("--app", "app_id", default=None, help="Revoke every link to this application.")
@click.option("--removed", is_flag=True,
              help="With --app: the application was removed; refuse the links issued to its "
                   "id anyway, should an application of that id be added again.")
def revoke_command(link_id: str | None, app_id: str | None, removed: bool) -> None:
    """Revoke one link (LINK_ID) or every link to an application (--app APP, which must
    exist unless --removed)."""
    if (link_id is None) == (app_id is None):
        raise click.UsageError("give a LINK_ID or --app APP (one of them)")
    if removed and app_id is None:
        raise click.UsageError("--removed goes with --app APP")
    if app_id is not None:
        portal.revoke_app(app_id, actor=cli_actor(), removed=removed)
        click.echo(f"every portal link to {app_id} issued until now is revoked")
    else:
        assert link_id is not None
        portal.revoke(link_id, actor=cli_actor())
        click.echo(f"portal link {link_id.strip().lower()} is revoked")
