"""A receiver's check of ``v1a`` signatures, with libsodium (PyNaCl): an ed25519
implementation independent of the one Hookline signs with (``cryptography``)."""

from __future__ import annotations

import base64
from collections.abc import Mapping

from nacl.exceptions import BadSignatureError
from nacl.signing import VerifyKey


def verified_v1a(public_key: str, headers: Mapping[str, str], body: bytes | str) -> int:
    """How many ``v1a`` entries of ``headers``' ``webhook-signature`` verify with
    ``public_key`` (``whpk_`` + base64 of the raw key) over the spec's signed content,
    ``{webhook-id}.{webhook-timestamp}.{body}``, as a receiver would check them."""
    key = VerifyKey(base64.b64decode(public_key.removeprefix("whpk_")))
    raw = body.encode() if isinstance(body, str) else body
    content = f"{headers['webhook-id']}.{headers['webhook-timestamp']}.".encode() + raw
    verified = 0
    for entry in headers["webhook-signature"].split(" "):
        version, _, encoded = entry.partition(",")
        if version != "v1a":
            continue
        try:
            key.verify(content, base64.b64decode(encoded))
            verified += 1
        except BadSignatureError:
            pass
    return verified
