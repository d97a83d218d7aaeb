"""Signing keys and the signatures they make, as Standard Webhooks serializes them.

An endpoint's secret is one of two kinds, told apart by its prefix alone (storage keeps no
other field):

- ``hmac``: ``whsec_`` + base64 of 24 to 64 random bytes; signs ``v1,<base64 HMAC-SHA256>``.
- ``ed25519``: ``whsk_`` + base64 of the private key; signs ``v1a,<base64 ed25519 signature>``.
  The receiver verifies with the public key, ``whpk_`` + base64 of its 32 raw bytes, and so
  holds nothing that can sign. Hookline writes the 64-byte form (the 32-byte seed, then the
  public key: libsodium's, Go's and Svix's) and reads that or the seed alone.

Both sign the spec's content, ``{webhook-id}.{webhook-timestamp}.{body}``. Pure: no Redis.
"""

from __future__ import annotations

import base64
import binascii
import functools
import math
import secrets as random_secrets
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from hookline.core.errors import InvalidField

if TYPE_CHECKING:  # cryptography and standardwebhooks load where a request is signed
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

HMAC = "hmac"
ED25519 = "ed25519"
#: The kinds of signing key, as ``--signature`` names them.
KINDS = (HMAC, ED25519)
HMAC_PREFIX = "whsec_"
PRIVATE_KEY_PREFIX = "whsk_"
PUBLIC_KEY_PREFIX = "whpk_"
#: The prefix of each kind's secret.
PREFIXES = {HMAC: HMAC_PREFIX, ED25519: PRIVATE_KEY_PREFIX}
#: Random bytes in a generated HMAC secret (the spec asks 24 to 64).
HMAC_BYTES = 32
SEED_BYTES = 32
#: ed25519 private keys read: the seed alone, or the seed then the public key.
PRIVATE_KEY_SIZES = (SEED_BYTES, 2 * SEED_BYTES)


def secret_kind(secret: str) -> str:
    """``ed25519`` for a ``whsk_`` key, else ``hmac``."""
    return ED25519 if secret.startswith(PRIVATE_KEY_PREFIX) else HMAC


def check_kind(kind: str) -> str:
    """``kind`` if it names a kind of signing key (:data:`KINDS`)."""
    if kind not in KINDS:
        raise InvalidField("signature", f"signature {kind!r} must be one of: "
                           + ", ".join(KINDS))
    return kind


def generate_signing_key(kind: str = HMAC) -> str:
    """A new secret of ``kind``: random HMAC bytes, or a new ed25519 key pair."""
    if check_kind(kind) == HMAC:
        return HMAC_PREFIX + _b64(random_secrets.token_bytes(HMAC_BYTES))
    seed = random_secrets.token_bytes(SEED_BYTES)
    return PRIVATE_KEY_PREFIX + _b64(seed + _raw_public_key(seed))


def check_signing_key(secret: object) -> str:
    """``secret`` if it is a well-formed ``whsec_`` or ``whsk_`` key; the error never quotes
    it."""
    if isinstance(secret, str) and secret.startswith(PUBLIC_KEY_PREFIX):
        raise InvalidField("secret", f"a {PUBLIC_KEY_PREFIX!r} key is a public key, which "
                           "verifies but cannot sign: give the ed25519 private key "
                           f"({PRIVATE_KEY_PREFIX!r}...)")
    if not isinstance(secret, str) or not secret.startswith(tuple(PREFIXES.values())):
        raise InvalidField("secret", f"a secret must start with {HMAC_PREFIX!r} (HMAC) or "
                           f"{PRIVATE_KEY_PREFIX!r} (ed25519) followed by base64")
    if secret_kind(secret) == HMAC:
        raw = _decoded(secret, HMAC_PREFIX)
        if not 24 <= len(raw) <= 64:
            raise InvalidField("secret", "a secret must hold 24 to 64 random bytes, this one "
                               f"holds {len(raw)}")
        return secret
    _seed(secret)
    return secret


def public_key(secret: str) -> str | None:
    """The ``whpk_`` public key of a ``whsk_`` key (not secret: the receiver's to keep); None
    for an HMAC secret, which has none."""
    if secret_kind(secret) != ED25519:
        return None
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    key = _private_key(secret).public_key()
    return PUBLIC_KEY_PREFIX + _b64(key.public_bytes(Encoding.Raw, PublicFormat.Raw))


def mask(secret: str) -> str:
    """The secret's prefix (its kind) and stars: safe to show."""
    return PREFIXES[secret_kind(secret)] + "..." + "*" * 4


def signature(secret: str, msg_id: str, sent_at: datetime, body: str) -> str:
    """One ``webhook-signature`` entry: ``v1,...`` for an HMAC secret, ``v1a,...`` for an
    ed25519 key, over ``{msg_id}.{timestamp}.{body}``."""
    if secret_kind(secret) == HMAC:
        from standardwebhooks import Webhook

        return Webhook(secret).sign(msg_id, sent_at, body)
    timestamp = math.floor(sent_at.replace(tzinfo=sent_at.tzinfo or UTC).timestamp())
    signed = _private_key(secret).sign(f"{msg_id}.{timestamp}.{body}".encode())
    return "v1a," + _b64(signed)


@functools.lru_cache(maxsize=1024)
def _private_key(secret: str) -> Ed25519PrivateKey:
    """The loaded key, kept: loading costs as much as a signature, once per endpoint here."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    return Ed25519PrivateKey.from_private_bytes(_seed(secret))


def _seed(secret: str) -> bytes:
    """The 32-byte seed of a ``whsk_`` key, checked: a 64-byte key's second half must be the
    public key of its first (else it is no key pair)."""
    raw = _decoded(secret, PRIVATE_KEY_PREFIX)
    if len(raw) not in PRIVATE_KEY_SIZES:
        raise InvalidField("secret", "an ed25519 key must hold 32 bytes (the seed) or 64 (the "
                           f"seed, then the public key), this one holds {len(raw)}")
    seed, given_public = raw[:SEED_BYTES], raw[SEED_BYTES:]
    if given_public and given_public != _raw_public_key(seed):
        raise InvalidField("secret", "the ed25519 key's last 32 bytes are not the public key "
                           "of its first 32: give the seed alone, or seed and public key")
    return seed


def _raw_public_key(seed: bytes) -> bytes:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    key = Ed25519PrivateKey.from_private_bytes(seed).public_key()
    return key.public_bytes(Encoding.Raw, PublicFormat.Raw)


def _decoded(secret: str, prefix: str) -> bytes:
    encoded = secret[len(prefix):]
    try:
        # Pad to a multiple of 4 only: strict decoding rejects padding beyond that.
        return base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise InvalidField("secret", f"the secret after {prefix!r} is not valid base64") from None


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()
