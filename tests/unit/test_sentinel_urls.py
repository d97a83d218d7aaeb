"""``sentinel://`` URLs for REDIS_URL and HOOKLINE_BROKER_URL: parsing, the settings that go
with them, what celeryconfig gives Celery. Pure: no Redis."""

from __future__ import annotations

import pytest
from redis.sentinel import MasterNotFoundError

from hookline.cli.output import redacted, redis_failure
from hookline.core import sentinel
from hookline.core.config import ALL_REPLICAS, ConfigError, load_settings
from hookline.transport.celery_settings import broker_settings

URL = "sentinel://:s3cret@10.0.0.1:26379,sentinel-b,[::1]:26380/2"


def test_a_url_names_every_sentinel_the_database_and_the_masters_credentials():
    parsed = sentinel.parse(URL)
    assert parsed.sentinels == (("10.0.0.1", 26379), ("sentinel-b", 26379), ("::1", 26380))
    assert (parsed.db, parsed.username, parsed.password) == (2, None, "s3cret")
    assert sentinel.parse("sentinel://u:p%40ss@h").password == "p@ss"
    assert sentinel.parse("sentinel://u:p%40ss@h").username == "u"
    assert sentinel.parse("sentinel://h").db == 0


@pytest.mark.parametrize(("url", "says"), [
    ("sentinel://h:99999/0", "not a TCP port"),
    ("sentinel://h:1,,h:2/0", "is not a Sentinel address"),
    ("sentinel://h/zero", "must be a number"),
    ("sentinel://h/0?master=m", "no query string"),
    ("sentinel://h o/0", "is not a Sentinel address"),
])
def test_a_bad_url_is_refused_saying_what_is_wrong(url, says):
    with pytest.raises(ValueError, match=says):
        sentinel.parse(url)


def test_shown_urls_never_carry_the_password():
    assert sentinel.parse(URL).shown() == "sentinel://***@10.0.0.1:26379,sentinel-b:26379,[::1]:26380/2"
    assert "s3cret" not in sentinel.shown("sentinel://:s3cret@h:1/x")
    # The CLI's errors ("Redis at ... does not answer") name the Sentinels, not the password.
    assert redacted(URL) == sentinel.parse(URL).shown()


def test_a_sentinel_url_without_a_master_name_is_refused_naming_the_setting():
    for env, variable in (({"REDIS_URL": URL}, "REDIS_URL is a"),
                          ({"HOOKLINE_REDIS_URL": URL}, "HOOKLINE_REDIS_URL is a"),
                          ({"REDIS_URL": "redis://r:1/0", "HOOKLINE_BROKER_URL": URL},
                           "HOOKLINE_BROKER_URL is a"),
                          ({"REDIS_URL": URL, "HOOKLINE_BROKER_URL": URL},
                           "REDIS_URL and HOOKLINE_BROKER_URL are")):
        with pytest.raises(ConfigError, match="set HOOKLINE_SENTINEL_MASTER") as refused:
            load_settings(env)
        assert "s3cret" not in str(refused.value)
        assert str(refused.value).startswith(variable)


def test_a_bad_sentinel_url_is_refused_naming_its_variable_without_the_password():
    with pytest.raises(ConfigError, match=r"HOOKLINE_BROKER_URL='sentinel://\*\*\*") as refused:
        load_settings({"HOOKLINE_BROKER_URL": "sentinel://:s3cret@h:0/0",
                       "HOOKLINE_SENTINEL_MASTER": "m"})
    assert "s3cret" not in str(refused.value)
    with pytest.raises(ConfigError, match="HOOKLINE_SENTINEL_MASTER='a b'"):
        load_settings({"REDIS_URL": URL, "HOOKLINE_SENTINEL_MASTER": "a b"})


def test_wait_for_every_replica_by_default_on_sentinel_and_none_on_a_plain_redis():
    assert load_settings({"REDIS_URL": URL, "HOOKLINE_SENTINEL_MASTER": "m"}
                         ).redis_wait_replicas == ALL_REPLICAS
    assert load_settings({"REDIS_URL": URL, "HOOKLINE_SENTINEL_MASTER": "m",
                          "HOOKLINE_REDIS_WAIT_REPLICAS": "1"}).redis_wait_replicas == 1
    assert load_settings({"REDIS_URL": "redis://r:1/0"}).redis_wait_replicas == 0
    with pytest.raises(ConfigError, match=r"HOOKLINE_REDIS_WAIT_REPLICAS=all .* sentinel://"):
        load_settings({"REDIS_URL": "redis://r:1/0", "HOOKLINE_REDIS_WAIT_REPLICAS": "all"})
    configured = load_settings({"REDIS_URL": "redis://r:1/0", "HOOKLINE_REDIS_WAIT_REPLICAS": "2",
                                "HOOKLINE_REDIS_WAIT_TIMEOUT": "0.05"})
    assert (configured.redis_wait_replicas, configured.redis_wait_timeout) == (2, 0.05)
    with pytest.raises(ConfigError, match="HOOKLINE_REDIS_WAIT_TIMEOUT"):
        load_settings({"HOOKLINE_REDIS_WAIT_TIMEOUT": "0"})


def test_the_sentinels_password_is_kept_out_of_the_settings_repr():
    config = load_settings({"REDIS_URL": URL, "HOOKLINE_SENTINEL_MASTER": "m",
                            "HOOKLINE_SENTINEL_PASSWORD": "sentinel-pass"})
    assert config.sentinel_password == "sentinel-pass"
    assert "sentinel-pass" not in repr(config)


def test_celery_gets_hooklines_sentinel_transport_the_master_and_every_sentinel():
    config = load_settings({"REDIS_URL": URL, "HOOKLINE_SENTINEL_MASTER": "mymaster",
                            "HOOKLINE_SENTINEL_PASSWORD": "sentinel-pass"})
    values = broker_settings(config)
    assert values["broker_transport"] == "hookline.transport.sentinel:SentinelTransport"
    assert values["broker_url"] == values["broker_write_url"] == "sentinel://:s3cret@10.0.0.1:26379/2"
    options = values["broker_transport_options"]
    assert options["master_name"] == "mymaster"
    assert options[sentinel.SENTINELS_OPTION] == [["10.0.0.1", 26379], ["sentinel-b", 26379],
                                                  ["::1", 26380]]
    assert options["sentinel_kwargs"]["password"] == "sentinel-pass"
    # A plain Redis broker is left as it was.
    plain = broker_settings(load_settings({"REDIS_URL": "redis://r:1/0"}))
    assert plain["broker_transport"] == "hookline.transport.redis:Transport"
    assert "master_name" not in plain["broker_transport_options"]


def test_no_master_from_the_sentinels_is_said_plainly_by_the_cli():
    failure = redis_failure(MasterNotFoundError("No master found for 'm' : {<a long repr>}"),
                            URL, "REDIS_URL")
    assert "(HOOKLINE_SENTINEL_MASTER)" in failure.message
    assert "repr" not in failure.message and "s3cret" not in failure.message
