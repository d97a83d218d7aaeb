"""Checking an endpoint's fields as an operator gives them (the CLI, the registry's ``add``
and ``update``): each check returns the value in canonical form or raises
:class:`~hookline.core.endpoint.EndpointError` naming the field and what to fix.

Pure but for :func:`check_target`, which resolves the URL's host name once to refuse a private
address early (every send checks again).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from hookline.core import ordering
from hookline.core.config import MAX_READ_TIMEOUT, settings
from hookline.core.endpoint import EndpointError
from hookline.core.errors import InvalidField
from hookline.core.event import check_endpoint_id, check_text
from hookline.core.headers import merge_headers
from hookline.core.policy import PolicyError, parse_rate
from hookline.core.signing import PREFIXES, check_kind, check_signing_key, secret_kind
from hookline.core.ssrf import Resolver, TargetRefused, pin_address, system_resolve
from hookline.core.subscriptions import (
    MAX_ENDPOINT_CHANNELS,
    SubscriptionError,
    parse_channels,
    parse_filters,
)
from hookline.core.target import check_endpoint_url, parse_target

#: Longest reason given for disabling an endpoint, characters.
MAX_REASON_LENGTH = 200
#: Longest per-endpoint read timeout, seconds: an attempt must end well inside its lease.
MAX_TIMEOUT = MAX_READ_TIMEOUT


def validate_endpoint_id(endpoint_id: str) -> str:
    """``endpoint_id`` if valid (:func:`hookline.core.event.check_endpoint_id`)."""
    try:
        return check_endpoint_id(endpoint_id)
    except InvalidField as exc:
        raise EndpointError(str(exc), exc.field) from None


def validate_url(url: str) -> str:
    """``url`` if well formed, as the sender will parse it (:mod:`hookline.core.target`)."""
    try:
        return parse_target(url).url
    except InvalidField as exc:
        raise EndpointError(str(exc), exc.field) from None


def check_target(url: str, *, resolve: Resolver = system_resolve) -> str:
    """Refuse a URL the SSRF guard would refuse at send time: http when HOOKLINE_HTTPS_ONLY
    is set, a name that can never be public (``localhost``, ``*.local``, ...), a private,
    loopback, link-local or other non-public address, or a name resolving to one. A name that
    does not resolve now is accepted: it is checked again at every send."""
    config = settings()
    try:
        target = check_endpoint_url(url, allowed=config.allowed_networks,
                                    https_only=config.https_only)
    except InvalidField as exc:
        raise EndpointError(str(exc), exc.field) from None
    try:
        pin_address(target.host, target.port, config.allowed_networks, resolve=resolve)
    except TargetRefused as refused:
        raise EndpointError(f"url refused: {refused}", "url") from None
    except OSError:
        pass  # DNS may be down now; every send checks again
    return url


def validate_reason(reason: str) -> str:
    """Why an endpoint is disabled: shown in listings, dead letters and log lines."""
    try:
        return check_text("reason", reason, limit=MAX_REASON_LENGTH)
    except InvalidField as exc:
        raise EndpointError(str(exc), exc.field) from None


def validate_secret(secret: str) -> str:
    """``secret`` if it is an HMAC secret (``whsec_``) or an ed25519 key (``whsk_``), well
    formed (:func:`hookline.core.signing.check_signing_key`); the error never quotes it."""
    try:
        return check_signing_key(secret)
    except InvalidField as exc:
        raise EndpointError(str(exc), exc.field) from None


def validate_signature(signature: str | None, secret: str | None = None) -> str | None:
    """The kind of key asked for (``hmac``, ``ed25519``), None when none is; with ``secret``
    given too, the two must agree."""
    if signature is None:
        return None
    try:
        kind = check_kind(signature)
    except InvalidField as exc:
        raise EndpointError(str(exc), exc.field) from None
    if secret is not None and secret_kind(secret) != kind:
        raise EndpointError(f"the secret given is no {kind} key: give --secret "
                            f"{PREFIXES[kind]}... or leave --secret out to have one generated",
                            "secret")
    return kind


def validate_timeout(timeout: float | None) -> float | None:
    if timeout is None:
        return None
    longest = settings().longest_read_timeout()
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not (
            0.1 <= timeout <= longest):
        raise EndpointError(
            f"timeout {timeout!r} must be between 0.1 and {longest:g} seconds (at most "
            f"{MAX_TIMEOUT:g}, and an attempt must end within CELERY_VISIBILITY_TIMEOUT)",
            "timeout")
    return float(timeout)


#: Largest burst: beyond this a "rate limit" no longer limits much.
MAX_BURST = 10_000


def validate_rate(rate: str | None) -> str | None:
    """A rate such as ``50/s`` in canonical form; None or ``none`` for no limit."""
    if rate is None or str(rate).strip().lower() in ("", "none"):
        return None
    try:
        parse_rate(rate)
    except PolicyError as exc:
        raise EndpointError(str(exc), "rate") from None
    return str(rate).strip()


def validate_burst(burst: int) -> int:
    if isinstance(burst, bool) or not isinstance(burst, int) or not 1 <= burst <= MAX_BURST:
        raise EndpointError(f"burst {burst!r} must be an integer from 1 to {MAX_BURST}", "burst")
    return burst


#: The largest --max-in-flight accepted.
MAX_IN_FLIGHT = 100_000


def validate_max_in_flight(value: int | None) -> int | None:
    """A hard cap on attempts in flight (None: none; 0 is accepted by update, to remove it)."""
    if value is None:
        return None
    if (isinstance(value, bool) or not isinstance(value, int)
            or not 0 <= value <= MAX_IN_FLIGHT):
        raise EndpointError(f"max_in_flight {value!r} must be an integer from 1 to "
                            f"{MAX_IN_FLIGHT} (0 to remove the cap)", "max_in_flight")
    return value or None


#: What an ordered endpoint does when a key's head is dead-lettered (``hookline.core.ordering``).
ORDER_POLICIES = ordering.POLICIES


def validate_order_policy(value: str | None) -> str | None:
    """``block`` or ``skip`` (None: unchanged, or the default, ``block``)."""
    if value is None:
        return None
    if value not in ORDER_POLICIES:
        raise EndpointError(f"order policy {value!r} must be one of: "
                            + ", ".join(ORDER_POLICIES), "order_policy")
    return value


def validate_headers(current: Mapping[str, str], added: Any = (), removed: Any = ()
                     ) -> dict[str, str]:
    """``current`` headers with ``removed`` names taken out and ``added`` (name, value) pairs
    set, each checked (:mod:`hookline.core.headers`); the error never quotes a value."""
    if isinstance(added, Mapping):
        added = list(added.items())
    try:
        return merge_headers(current, added, removed)
    except InvalidField as exc:
        raise EndpointError(str(exc), exc.field) from None


def validate_policy_override(overrides: Mapping[str, Any]) -> dict[str, Any]:
    try:
        settings().retry_policy.replace(overrides)
    except PolicyError as exc:
        raise EndpointError(f"invalid retry policy: {exc}", "retry_policy") from None
    return dict(overrides)


def validate_subscription(event_types: Any, channels: Any) -> tuple[tuple[str, ...],
                                                                      tuple[str, ...]]:
    """An endpoint's event-type filter and channels, checked (None: none)."""
    try:
        return (parse_filters(event_types),
                parse_channels(channels, limit=MAX_ENDPOINT_CHANNELS))
    except SubscriptionError as exc:
        raise EndpointError(str(exc), exc.field) from None


#: The settings each checked alone, by its own check, when given (not None): name -> check.
#: The rest need more than their value (the URL's address, the secret's kind, the current
#: headers and retry policy, the application and the catalog in Redis).
SETTING_CHECKS: dict[str, Callable[[Any], Any]] = {
    "timeout": validate_timeout, "rate": validate_rate, "burst": validate_burst,
    "max_in_flight": validate_max_in_flight, "ordered": bool,
    "order_policy": validate_order_policy, "trace_context": bool,
}


def checked_settings(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The settings of ``spec`` (an :class:`~hookline.core.specs.EndpointSpec`) that
    :data:`SETTING_CHECKS` checks, those given, each checked: name -> the value kept."""
    return {name: check(spec[name]) for name, check in SETTING_CHECKS.items()
            if spec.get(name) is not None}
