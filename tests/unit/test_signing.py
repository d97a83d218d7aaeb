"""Signing keys (hookline.core.signing): HMAC secrets sign ``v1``, ed25519 keys ``v1a``, the
kind told by the prefix; ed25519 signatures checked with libsodium (PyNaCl), an implementation
independent of the one that signs. Pure: no Redis."""

from __future__ import annotations

import base64
from datetime import UTC, datetime

import pytest
from standardwebhooks import Webhook

from hookline.core.endpoint import Endpoint, EndpointError, generate_secret, mask_secret
from hookline.core.endpoint_validation import validate_secret, validate_signature
from hookline.core.errors import InvalidField
from hookline.core.signing import (
    check_signing_key,
    generate_signing_key,
    public_key,
    secret_kind,
    signature,
)
from hookline.delivery.sender import sign
from tests.support.signatures import verified_v1a

#: RFC 8032 section 7.1, test 1: a seed and its public key.
RFC_SEED = bytes.fromhex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
RFC_PUBLIC = bytes.fromhex("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")
SENT_AT = datetime(2026, 3, 1, 12, 0, 5, 750000, tzinfo=UTC)
BODY = '{"type":"order.created","timestamp":"2026-03-01T12:00:00Z","data":{"n":1}}'


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def headers_for(header: str, msg_id: str = "msg_1") -> dict[str, str]:
    return {"webhook-id": msg_id, "webhook-timestamp": str(int(SENT_AT.timestamp())),
            "webhook-signature": header}


def test_a_generated_ed25519_key_is_the_seed_then_its_public_key():
    key = generate_secret("ed25519")
    raw = base64.b64decode(key.removeprefix("whsk_"))
    assert key.startswith("whsk_") and len(raw) == 64
    assert check_signing_key(key) == key and secret_kind(key) == "ed25519"
    public = public_key(key)
    assert public == "whpk_" + b64(raw[32:])
    assert len(base64.b64decode(public.removeprefix("whpk_"))) == 32
    assert generate_secret("ed25519") != key


def test_the_public_key_is_the_one_rfc_8032_gives_for_the_seed():
    assert public_key("whsk_" + b64(RFC_SEED)) == "whpk_" + b64(RFC_PUBLIC)
    assert public_key("whsk_" + b64(RFC_SEED + RFC_PUBLIC)) == "whpk_" + b64(RFC_PUBLIC)


def test_a_v1a_signature_verifies_with_libsodium_over_the_specs_content():
    key = generate_signing_key("ed25519")
    msg_id = "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W"
    entry = signature(key, msg_id, SENT_AT, BODY)
    assert entry.startswith("v1a,") and len(base64.b64decode(entry[4:])) == 64
    # The timestamp signed is the header's: whole seconds.
    assert verified_v1a(public_key(key), headers_for(entry, msg_id), BODY) == 1
    assert verified_v1a(public_key(key), headers_for(entry, msg_id), BODY + " ") == 0
    assert verified_v1a(public_key(key), headers_for(entry, "msg_2"), BODY) == 0
    other = public_key(generate_signing_key("ed25519"))
    assert verified_v1a(other, headers_for(entry, msg_id), BODY) == 0


def test_the_seed_alone_and_seed_with_public_key_sign_alike():
    short, full = "whsk_" + b64(RFC_SEED), "whsk_" + b64(RFC_SEED + RFC_PUBLIC)
    assert signature(short, "msg_1", SENT_AT, BODY) == signature(full, "msg_1", SENT_AT, BODY)


def test_one_header_carries_v1a_and_v1_for_a_rotation_from_hmac_to_ed25519():
    new, old = generate_secret("ed25519"), generate_secret()
    header = sign((new, old), "msg_1", SENT_AT, BODY)
    assert [entry.split(",")[0] for entry in header.split(" ")] == ["v1a", "v1"]
    # A receiver still on the HMAC secret (the standardwebhooks library's signature: the
    # verify call would refuse SENT_AT as too old), and one on the public key.
    assert Webhook(old).sign("msg_1", SENT_AT, BODY) in header.split(" ")
    assert verified_v1a(public_key(new), headers_for(header), BODY) == 1


@pytest.mark.parametrize(("key", "message"), [
    ("whpk_" + b64(RFC_PUBLIC), "a public key, which verifies but cannot sign"),
    ("sk_" + b64(RFC_SEED), r"must start with 'whsec_' \(HMAC\) or 'whsk_' \(ed25519\)"),
    ("whsk_!!!", "not valid base64"),
    ("whsk_" + b64(RFC_SEED[:31]), r"32 bytes \(the seed\) or 64"),
    ("whsk_" + b64(RFC_SEED + RFC_SEED), "not the public key of its first 32"),
    ("whsec_c2hvcnQ=", "24 to 64"),
])
def test_malformed_keys_are_refused_without_quoting_them(key, message):
    with pytest.raises(EndpointError, match=message) as refused:
        validate_secret(key)
    assert key.split("_", 1)[1] not in str(refused.value)
    assert refused.value.field == "secret"


def test_a_given_secret_must_be_of_the_kind_asked_for():
    assert validate_signature(None) is None
    assert validate_signature("ed25519", generate_secret("ed25519")) == "ed25519"
    with pytest.raises(EndpointError, match="no ed25519 key"):
        validate_signature("ed25519", generate_secret())
    with pytest.raises(EndpointError, match="one of: hmac, ed25519"):
        validate_signature("rsa")
    with pytest.raises(InvalidField, match="one of"):
        generate_signing_key("rsa")


def test_the_public_view_shows_kinds_and_public_keys_never_a_private_key():
    key, old = generate_secret("ed25519"), generate_secret()
    endpoint = Endpoint(id="ep", url="https://r.example/h", secrets=(key, old),
                        secret_expiry={old: 1e10})
    view = endpoint.public()
    assert view["secrets"] == ["whsk_...****", "whsec_...****"]
    assert view["secret_kinds"] == ["ed25519", "hmac"]
    assert view["public_keys"] == [public_key(key), None]
    assert view["secret_expires_at"] == [None, 1e10]
    seed = b64(base64.b64decode(key.removeprefix("whsk_"))[:32])
    for hidden in (key, key.removeprefix("whsk_"), seed.rstrip("="), old.removeprefix("whsec_")):
        assert hidden not in repr(view)
    assert mask_secret(key) == "whsk_...****"
