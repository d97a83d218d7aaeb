"""The SSRF guard: which addresses a webhook may be sent to.

Customers type endpoint URLs; a sender that follows them anywhere is a way into the private
network (cloud metadata at 169.254.169.254, admin ports on loopback, the office LAN). Only
globally routable unicast addresses pass, unless an operator allows a network explicitly
(``HOOKLINE_ALLOWED_NETWORKS``). The host is resolved once per attempt and the connection goes
to the address that was checked (see :mod:`hookline.delivery.sender`), so DNS rebinding cannot
slip a private address in between the check and the connect.

The rules are pure functions; resolution is injectable for tests.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Iterable, Sequence

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

#: Ranges Python's ``is_global`` lets through but that must not be reached either.
EXTRA_BLOCKED: tuple[Network, ...] = (
    ipaddress.ip_network("100.64.0.0/10"),  # CGNAT, shared address space
    ipaddress.ip_network("64:ff9b::/96"),  # NAT64: an IPv4 address in disguise
    ipaddress.ip_network("64:ff9b:1::/48"),
    ipaddress.ip_network("2002::/16"),  # 6to4: idem
)


class TargetRefused(Exception):
    """The URL's host is, or resolves to, an address Hookline does not send to.

    Not a ValueError, so it is never mistaken for a malformed URL (``InvalidTarget``)."""


def parse_networks(text: str) -> tuple[Network, ...]:
    """``"127.0.0.0/8, 10.1.0.0/16"`` -> networks; raises ValueError naming a bad entry."""
    networks = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            networks.append(ipaddress.ip_network(part, strict=False))
        except ValueError:
            raise ValueError(f"{part!r} is not a network (use CIDR, e.g. 10.0.0.0/8)") from None
    return tuple(networks)


def why_refused(address: IPAddress) -> str | None:
    """Why ``address`` may not be a webhook target, or None if it may."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return "an IPv4-mapped IPv6 address"
    checks = [
        ("unspecified", address.is_unspecified),
        ("loopback", address.is_loopback),
        ("link-local (cloud metadata lives here)", address.is_link_local),
        ("multicast", address.is_multicast),
        ("private", address.is_private),
        ("reserved", address.is_reserved),
    ]
    for reason, hit in checks:
        if hit:
            return f"a {reason} address"
    if any(address in network for network in EXTRA_BLOCKED):
        return "a shared (CGNAT) or translated address"
    if not address.is_global:
        return "not a globally routable address"
    return None


def check_address(address: IPAddress, allowed: Iterable[Network] = ()) -> None:
    """Raise :class:`TargetRefused` unless ``address`` is allowed or globally routable."""
    if any(address.version == net.version and address in net for net in allowed):
        return
    reason = why_refused(address)
    if reason is not None:
        raise TargetRefused(
            f"{address} is {reason}: Hookline does not send webhooks there "
            "(an operator can allow a network with HOOKLINE_ALLOWED_NETWORKS)"
        )


Resolver = Callable[[str, int], Sequence[str]]


def system_resolve(host: str, port: int) -> list[str]:
    """The host's addresses from the system resolver (raises OSError when it fails)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def pin_address(host: str, port: int, allowed: Iterable[Network] = (), *,
                resolve: Resolver = system_resolve) -> str:
    """Resolve ``host`` once and return the address to connect to.

    Every address the name resolves to must pass: a name with one public and one private
    address is refused rather than tried until the private one answers.
    """
    allowed = tuple(allowed)
    try:
        literal: IPAddress | None = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        literal = None
    if literal is not None:
        check_address(literal, allowed)
        return str(literal)
    addresses = [ipaddress.ip_address(a.split("%")[0]) for a in resolve(host, port)]
    if not addresses:
        raise OSError(f"{host} has no address")
    for address in addresses:
        try:
            check_address(address, allowed)
        except TargetRefused as refused:
            raise TargetRefused(f"{host} resolves to {refused}") from None
    return str(addresses[0])
