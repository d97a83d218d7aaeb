"""Sealing at rest (hookline.core.sealing) and the endpoint fields it protects: pure logic."""

from __future__ import annotations

import pytest

from hookline.core import config, sealing
from hookline.core.endpoint import Endpoint, SealedRecordError
from hookline.core.env import ConfigError

AAD = sealing.associated_data("acme", "secrets")


def ring(*keys: str) -> sealing.Keyring:
    return sealing.Keyring(sealing.parse_keys(",".join(keys)))


def test_a_sealed_value_opens_with_its_key_and_holds_nothing_of_the_plaintext() -> None:
    key = sealing.generate_key()
    sealed = ring(key).seal("whsec_plaintext", AAD)
    assert sealed.startswith("hlenc1:") and "plaintext" not in sealed
    assert sealing.Keyring(sealing.parse_keys(key)).open(sealed, AAD, "x") == "whsec_plaintext"
    assert ring(key).seal("whsec_plaintext", AAD) != sealed  # a fresh nonce each time


def test_a_value_copied_to_another_endpoint_or_field_does_not_open() -> None:
    keyring = ring(sealing.generate_key())
    sealed = keyring.seal("whsec_x", AAD)
    fresh = sealing.Keyring(keyring.keys)  # no memo of this value
    for other in (sealing.associated_data("other", "secrets"),
                  sealing.associated_data("acme", "headers")):
        with pytest.raises(sealing.DamagedSeal, match="copied from another endpoint"):
            fresh.open(sealed, other, "the secrets of endpoint 'other'")


def test_a_damaged_value_is_refused_and_named() -> None:
    keyring = ring(sealing.generate_key())
    sealed = keyring.seal("whsec_x", AAD)
    damaged = sealed[:-4] + ("AAAA" if not sealed.endswith("AAAA") else "BBBB")
    with pytest.raises(sealing.DamagedSeal, match="endpoint 'acme'"):
        sealing.Keyring(keyring.keys).open(damaged, AAD, "the secrets of endpoint 'acme'")


def test_an_older_key_still_opens_what_it_sealed_and_the_newest_seals() -> None:
    old, new = sealing.generate_key(), sealing.generate_key()
    sealed_old = ring(old).seal("a", AAD)
    both = ring(new, old)
    assert both.open(sealed_old, AAD, "x") == "a"
    assert sealing.sealed_key_id(both.seal("b", AAD)) == both.newest_id
    assert both.newest_id != sealing.sealed_key_id(sealed_old)


def test_a_missing_key_names_the_key_id_and_the_setting_never_a_key() -> None:
    key = sealing.generate_key()
    sealed = ring(key).seal("a", AAD)
    with pytest.raises(sealing.MissingKey) as refused:
        ring(sealing.generate_key()).open(sealed, AAD, "the secrets of endpoint 'acme'")
    message = str(refused.value)
    assert "HOOKLINE_ENCRYPTION_KEYS" in message and sealing.sealed_key_id(sealed) in message
    assert key not in message
    with pytest.raises(sealing.MissingKey):
        sealing.Keyring(()).open(sealed, AAD, "x")


def test_a_plain_value_passes_through_and_no_key_seals_nothing() -> None:
    assert sealing.Keyring(()).seal("whsec_x", AAD) == "whsec_x"
    assert ring(sealing.generate_key()).open('["whsec_x"]', AAD, "x") == '["whsec_x"]'


def test_opening_is_memoised_per_keyring() -> None:
    keyring = ring(sealing.generate_key())
    sealed = sealing.Keyring(keyring.keys).seal("a", AAD)
    assert keyring.open(sealed, AAD, "x") == "a"
    keyring._ciphers.clear()  # a second open must not need the cipher
    assert keyring.open(sealed, AAD, "x") == "a"


@pytest.mark.parametrize(("value", "error"), [
    ("nope", "key 1 must start with 'hlkey_'"),
    ("hlkey_!!!!", "key 1 is not valid base64 after 'hlkey_'"),
    ("hlkey_AAAA", "key 1 must hold 32 bytes, it holds 3"),
])
def test_a_bad_key_setting_is_refused_in_one_line_without_the_value(value, error) -> None:
    with pytest.raises(ConfigError) as refused:
        config.load_settings({"HOOKLINE_ENCRYPTION_KEYS": value})
    assert str(refused.value) == f"HOOKLINE_ENCRYPTION_KEYS: {error}" + (
        " (make one with 'hookline secrets generate-key')" if "start" in error else "")


def test_the_same_key_twice_is_refused() -> None:
    key = sealing.generate_key()
    with pytest.raises(ConfigError, match="listed twice"):
        config.load_settings({"HOOKLINE_ENCRYPTION_KEYS": f"{key}, {key}"})


def test_the_settings_never_show_the_keys() -> None:
    key = sealing.generate_key()
    loaded = config.load_settings({"HOOKLINE_ENCRYPTION_KEYS": key})
    assert len(loaded.encryption_keys) == 1
    assert key.removeprefix("hlkey_") not in repr(loaded)


def test_an_endpoints_secrets_and_headers_are_sealed_in_its_hash_and_read_back() -> None:
    key = sealing.generate_key()
    config.configure({"HOOKLINE_ENCRYPTION_KEYS": key})
    try:
        endpoint = Endpoint(id="acme", url="https://example.com/", secrets=("whsec_AAAA",),
                            headers={"Authorization": "Bearer t0ken"})
        stored = endpoint.to_hash()
        assert "whsec_AAAA" not in stored["secrets"] and "t0ken" not in stored["headers"]
        read = Endpoint.from_hash("acme", stored)
        assert read.secrets == ("whsec_AAAA",) and read.headers == {"Authorization": "Bearer t0ken"}
        with pytest.raises(SealedRecordError, match="endpoint 'other'"):
            Endpoint.from_hash("other", {**stored, "url": "https://example.com/"})
        config.configure({"HOOKLINE_ENCRYPTION_KEYS": sealing.generate_key()})
        with pytest.raises(SealedRecordError, match="HOOKLINE_ENCRYPTION_KEYS") as refused:
            Endpoint.from_hash("acme", stored)
        assert refused.value.missing_key
    finally:
        config.configure()
