"""Readers of environment variables. A reader turns one variable's text into a value, or refuses
it with a :class:`ConfigError` that names the variable; it also says what it accepts and what
its default is, so the settings reference is written by the same object that reads the value
and cannot drift from it (``hookline.core.variables`` declares the variables)."""

from __future__ import annotations

import ipaddress
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hookline.core.errors import HooklineError
from hookline.core.ssrf import parse_networks

Env = Mapping[str, str]

_ENDPOINT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_MODULE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


class ConfigError(HooklineError, ValueError):
    """An environment variable holds a value Hookline cannot use; the message names it."""


def raw(env: Env, name: str) -> str:
    """The variable's text, stripped; "" when it is unset or blank (both mean the default)."""
    return (env.get(name) or "").strip()


def _amount(value: float, unit: str) -> str:
    """A number as the reference shows it: ``3600 s (1 h)``, ``1,000,000``."""
    text = f"{value:,.0f}" if float(value).is_integer() else f"{value:g}"
    if unit != "s":
        return f"{text} {unit}".strip()
    for size, name in ((86400, "day"), (3600, "h")):
        if value >= size and value % size == 0:
            count = int(value // size)
            plural = "s" if name == "day" and count != 1 else ""
            return f"{text} s ({count} {name}{plural})"
    return f"{text} s"


@dataclass(frozen=True)
class Number:
    """A finite float from ``minimum`` to ``maximum``; ``default`` when unset (``None``: the
    setting is off unless given)."""

    default: float | None
    minimum: float = 0.0
    maximum: float = math.inf
    unit: str = "s"

    def read(self, env: Env, name: str) -> float | None:
        text = raw(env, name)
        if not text:
            return self.default
        try:
            value = float(text)
        except ValueError:
            raise ConfigError(f"{name}={env.get(name)!r} is not a number") from None
        if not math.isfinite(value) or not self.minimum <= value <= self.maximum:
            bounds = (f">= {self.minimum}" if self.maximum == math.inf
                      else f"between {self.minimum} and {self.maximum}")
            raise ConfigError(f"{name}={env.get(name)!r} must be a finite number {bounds}")
        return value

    def shown_default(self) -> str:
        return "(none)" if self.default is None else _amount(self.default, self.unit)

    def accepts(self) -> str:
        low = "any" if self.minimum == -math.inf else _amount(self.minimum, self.unit)
        if self.maximum == math.inf:
            return f"a number, at least {low}" if low != "any" else "a number"
        return f"{low} to {_amount(self.maximum, self.unit)}"


@dataclass(frozen=True)
class Integer:
    """A whole number from ``minimum`` to ``maximum``."""

    default: int
    minimum: int = 0
    maximum: int = 10**9
    unit: str = ""

    def read(self, env: Env, name: str) -> int:
        text = raw(env, name)
        if not text:
            return self.default
        try:
            value = int(text)
        except ValueError:
            raise ConfigError(f"{name}={env.get(name)!r} is not an integer") from None
        if not self.minimum <= value <= self.maximum:
            raise ConfigError(f"{name}={env.get(name)!r} must be an integer from "
                              f"{self.minimum} to {self.maximum}")
        return value

    def shown_default(self) -> str:
        return _amount(self.default, self.unit)

    def accepts(self) -> str:
        return f"an integer, {self.minimum:,} to {self.maximum:,}"


@dataclass(frozen=True)
class Port:
    """A TCP port, or 0 for none."""

    default: int

    def read(self, env: Env, name: str) -> int:
        port = Integer(self.default).read(env, name)
        if port > 65535:
            raise ConfigError(f"{name}={port} must be a TCP port (1-65535), or 0 for none")
        return port

    def shown_default(self) -> str:
        return str(self.default)

    def accepts(self) -> str:
        return "a TCP port; 0: none"


@dataclass(frozen=True)
class Flag:
    """``true``/``false`` (also 1/0, yes/no, on/off)."""

    default: bool

    def read(self, env: Env, name: str) -> bool:
        text = raw(env, name).lower()
        if not text:
            return self.default
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"{name}={text!r} must be true or false")

    def shown_default(self) -> str:
        return "true" if self.default else "false"

    def accepts(self) -> str:
        return "true or false"


@dataclass(frozen=True)
class Choice:
    """One of ``choices``, case-insensitive; the first is the default."""

    choices: tuple[str, ...]

    def read(self, env: Env, name: str) -> str:
        value = (raw(env, name) or self.choices[0]).lower()
        if value not in self.choices:
            raise ConfigError(f"{name}={value!r} must be one of {', '.join(self.choices)}")
        return value

    def shown_default(self) -> str:
        return self.choices[0]

    def accepts(self) -> str:
        return " or ".join(self.choices)


@dataclass(frozen=True)
class Text:
    """Any text (a path, a password); ``default`` when unset."""

    default: str = ""
    description: str = "text"

    def read(self, env: Env, name: str) -> str:
        value = env.get(name)
        return self.default if value is None or value == "" else value

    def shown_default(self) -> str:
        return f"`{self.default}`" if self.default else "(none)"

    def accepts(self) -> str:
        return self.description


@dataclass(frozen=True)
class Address:
    """An IP address to listen on."""

    default: str

    def read(self, env: Env, name: str) -> str:
        text = raw(env, name)
        if not text:
            return self.default
        try:
            return str(ipaddress.ip_address(text.strip("[]")))
        except ValueError:
            raise ConfigError(f"{name}={text!r} must be an IP address to listen on (e.g. "
                              "127.0.0.1, or 0.0.0.0 for every interface)") from None

    def shown_default(self) -> str:
        return f"`{self.default}`"

    def accepts(self) -> str:
        return "an IP address; 0.0.0.0 or :: for every interface"


@dataclass(frozen=True)
class Networks:
    """Comma-separated CIDR networks."""

    def read(self, env: Env, name: str) -> tuple[Any, ...]:
        try:
            return parse_networks(env.get(name) or "")
        except ValueError as exc:
            raise ConfigError(f"{name}: {exc}") from None

    def shown_default(self) -> str:
        return "(none)"

    def accepts(self) -> str:
        return "comma-separated CIDRs, e.g. `127.0.0.0/8,10.1.0.0/16`"


@dataclass(frozen=True)
class EndpointId:
    """A registered endpoint's id, or unset."""

    def read(self, env: Env, name: str) -> str | None:
        value = raw(env, name)
        if not value:
            return None
        if not _ENDPOINT_ID.match(value):
            raise ConfigError(f"{name}={value[:80]!r} must be an endpoint id: a letter or "
                              "digit, then up to 63 letters, digits, '_', '.' or '-'")
        return value

    def shown_default(self) -> str:
        return "(none)"

    def accepts(self) -> str:
        return "an endpoint id"


@dataclass(frozen=True)
class ModuleNames:
    """Comma-separated dotted module names."""

    def read(self, env: Env, name: str) -> tuple[str, ...]:
        names = tuple(part.strip() for part in (env.get(name) or "").split(",") if part.strip())
        for module in names:
            if not _MODULE_NAME.match(module):
                raise ConfigError(f"{name}: {module[:80]!r} is not a dotted module name "
                                  "(e.g. myshop.webhook_signals)")
        return names

    def shown_default(self) -> str:
        return "(none)"

    def accepts(self) -> str:
        return "comma-separated module names"


@dataclass(frozen=True)
class EncryptionKeys:
    """Comma-separated keys of ``hookline.core.sealing``, newest first: their raw bytes. A
    refusal says which key (by position) is wrong, never what it holds."""

    def read(self, env: Env, name: str) -> tuple[bytes, ...]:
        text = env.get(name) or ""
        if not text.strip():  # no key: the sealing module is not needed to say so
            return ()
        from hookline.core import sealing

        try:
            return sealing.parse_keys(text)
        except ValueError as exc:
            raise ConfigError(f"{name}: {exc}") from None

    def shown_default(self) -> str:
        return "(none: stored in plain text)"

    def accepts(self) -> str:
        return "comma-separated keys from `hookline secrets generate-key`, newest first"


@dataclass(frozen=True)
class Described:
    """A variable its loader reads with rules of its own (a URL, a value whose default depends
    on another): only what the reference shows is declared here."""

    default: str
    values: str

    def shown_default(self) -> str:
        return self.default

    def accepts(self) -> str:
        return self.values


Reader = Number | Integer | Port | Flag | Choice | Text | Address | Networks | EndpointId | \
    ModuleNames | EncryptionKeys
