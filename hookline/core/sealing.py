"""Secrets sealed at rest: AES-256-GCM with keys from ``HOOKLINE_ENCRYPTION_KEYS``.

An endpoint's signing secrets (HMAC and ed25519 keys) and its header values are the only
credentials Hookline keeps. With keys set, each is stored as a *sealed* value::

    hlenc1:<key id>:<base64url of nonce (12 bytes) + ciphertext + tag (16 bytes)>

The key id (8 hex digits of a SHA-256 of the key) names the key that sealed it, so a reader
tells "no key for this" from "this is damaged" and ``hookline secrets reencrypt`` knows what
is still to move. The associated data binds a value to its endpoint and field
(``hookline/endpoint/<id>/secrets``): a ciphertext copied to another endpoint, or from the
headers field to the secrets field, does not open.

Opening is memoised per keyring (a bounded map from sealed value to plaintext): a worker
decrypts an endpoint's secrets once per change of the record, not once per delivery.

What this protects: a copy of Redis's data (an RDB or AOF backup, a replica, ``MONITOR``,
a support dump) without the keys. What it does not: a process that holds the keys (a worker's
memory, its environment) or a stolen key. Pure: no Redis, no settings.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from hookline.core.errors import HooklineError

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

#: The prefix of a key as ``hookline secrets generate-key`` prints it.
KEY_PREFIX = "hlkey_"
#: The prefix of a sealed value (format version 1).
SEALED_PREFIX = "hlenc1:"
#: The variable the keys come from, named in every refusal.
VARIABLE = "HOOKLINE_ENCRYPTION_KEYS"
_NONCE_BYTES = 12
#: Opened values kept per keyring: far more than a worker's endpoints change between reads.
_MEMO_LIMIT = 8192


class SealingError(HooklineError, ValueError):
    """A sealed value that cannot be opened; the message says which and why, never the value."""


class MissingKey(SealingError):
    """Sealed with a key the keyring does not hold (or no keyring at all)."""

    def __init__(self, key_id: str, where: str) -> None:
        super().__init__(f"{where} are encrypted with key {key_id}, which {VARIABLE} does not "
                         f"hold: add that key to {VARIABLE} (newest first)")
        self.key_id = key_id


class DamagedSeal(SealingError):
    """The right key by its id, but the value does not open: damaged, or copied from another
    endpoint or field."""


def generate_key() -> str:
    """A new random key, in the form ``HOOKLINE_ENCRYPTION_KEYS`` takes."""
    return KEY_PREFIX + base64.urlsafe_b64encode(os.urandom(32)).decode().rstrip("=")


def key_id(raw: bytes) -> str:
    """The public name of a key: 8 hex digits of a SHA-256 over it (not the key)."""
    return hashlib.sha256(b"hookline key id\0" + raw).hexdigest()[:8]


def parse_key(text: str, position: int) -> bytes:
    """The 32 raw bytes of one key; ``position`` (1-based) is named in the error, the key
    never is."""
    text = text.strip()
    if not text.startswith(KEY_PREFIX):
        raise ValueError(f"key {position} must start with {KEY_PREFIX!r} (make one with "
                         "'hookline secrets generate-key')")
    encoded = text[len(KEY_PREFIX):]
    try:
        raw = base64.b64decode(encoded + "=" * (-len(encoded) % 4), altchars=b"-_",
                               validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"key {position} is not valid base64 after {KEY_PREFIX!r}") from None
    if len(raw) != 32:
        raise ValueError(f"key {position} must hold 32 bytes, it holds {len(raw)}")
    return raw


def parse_keys(text: str) -> tuple[bytes, ...]:
    """The keys of a comma-separated list, newest first; the same key twice is refused."""
    raws = tuple(parse_key(part, n) for n, part in
                 enumerate((p for p in text.split(",") if p.strip()), start=1))
    if len({key_id(raw) for raw in raws}) != len(raws):
        raise ValueError("the same key is listed twice")
    return raws


def is_sealed(value: str) -> bool:
    return value.startswith(SEALED_PREFIX)


def sealed_key_id(value: str) -> str | None:
    """The id of the key that sealed ``value``; None for a plain value."""
    if not is_sealed(value):
        return None
    return value[len(SEALED_PREFIX):].partition(":")[0]


def associated_data(endpoint_id: str, field_name: str) -> bytes:
    return f"hookline/endpoint/{endpoint_id}/{field_name}".encode()


@dataclass(eq=False)
class Keyring:
    """The configured keys, newest first: the newest seals, any opens its own values."""

    keys: tuple[bytes, ...]
    _ciphers: dict[str, AESGCM] = field(init=False, repr=False)
    _opened: dict[tuple[str, bytes], str] = field(init=False, repr=False, default_factory=dict)

    def __post_init__(self) -> None:
        self._ciphers = {}
        if self.keys:  # cryptography is loaded where a key is set, not by a web process
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM

            self._ciphers = {key_id(raw): AESGCM(raw) for raw in self.keys}

    @property
    def enabled(self) -> bool:
        return bool(self.keys)

    @property
    def newest_id(self) -> str | None:
        return key_id(self.keys[0]) if self.keys else None

    def holds(self, key: str) -> bool:
        return key in self._ciphers

    def seal(self, plaintext: str, aad: bytes) -> str:
        """``plaintext`` sealed with the newest key; unchanged when there is no key."""
        if not self.keys:
            return plaintext
        newest = self.newest_id or ""
        nonce = os.urandom(_NONCE_BYTES)
        sealed = nonce + self._ciphers[newest].encrypt(nonce, plaintext.encode(), aad)
        value = f"{SEALED_PREFIX}{newest}:{base64.urlsafe_b64encode(sealed).decode()}"
        self._remember((value, aad), plaintext)
        return value

    def open(self, value: str, aad: bytes, where: str) -> str:
        """The plaintext of a stored value (a plain one is returned as it is). ``where``
        names the record in errors (``the secrets of endpoint 'acme'``)."""
        if not is_sealed(value):
            return value
        known = self._opened.get((value, aad))
        if known is not None:
            return known
        kid, _, encoded = value[len(SEALED_PREFIX):].partition(":")
        cipher = self._ciphers.get(kid)
        if cipher is None:
            raise MissingKey(kid, where)
        from cryptography.exceptions import InvalidTag  # loaded with the cipher already
        try:
            sealed = base64.urlsafe_b64decode(encoded)
            plaintext = cipher.decrypt(sealed[:_NONCE_BYTES], sealed[_NONCE_BYTES:], aad)
        except (binascii.Error, ValueError, InvalidTag):
            raise DamagedSeal(f"{where} do not decrypt with key {kid}: the stored value is "
                              "damaged, or was copied from another endpoint or field") from None
        text = plaintext.decode()
        self._remember((value, aad), text)
        return text

    def _remember(self, memo: tuple[str, bytes], plaintext: str) -> None:
        if len(self._opened) >= _MEMO_LIMIT:
            self._opened.clear()
        self._opened[memo] = plaintext


@functools.lru_cache(maxsize=8)
def keyring(keys: Sequence[bytes]) -> Keyring:
    """One keyring (and its memo) per set of keys; ``keys`` as :func:`parse_keys` gives."""
    return Keyring(tuple(keys))
