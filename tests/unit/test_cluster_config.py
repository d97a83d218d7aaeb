"""A Redis Cluster for Hookline's state: the ``redis+cluster://`` URL, the broker it refuses,
and the hash-tag shards the global structures are split over (``hookline.store.keys``)."""

import pytest
from redis.crc import key_slot

from hookline.core.config import ConfigError, load_settings
from hookline.store import keys

CLUSTER = "redis+cluster://:s3cret-pass@10.0.0.5:7000"


def test_a_cluster_state_url_gets_sixteen_shards_and_a_single_redis_one():
    assert load_settings({}).state_shards == 1
    config = load_settings({"REDIS_URL": CLUSTER, "HOOKLINE_BROKER_URL": "redis://b:6379/0"})
    assert config.state_is_cluster and config.state_shards == 16
    assert load_settings({"REDIS_URL": "rediss+cluster://c:7000", "HOOKLINE_BROKER_URL":
                          "pyamqp://guest@rabbit//", "HOOKLINE_STATE_SHARDS": "4"}
                         ).state_shards == 4


@pytest.mark.parametrize(
    ("env", "said"),
    [
        ({"REDIS_URL": CLUSTER}, "REDIS_URL names a Redis Cluster and HOOKLINE_BROKER_URL is "
                                 "not set"),
        ({"REDIS_URL": "redis://r:1/0", "HOOKLINE_BROKER_URL": CLUSTER},
         "cannot be Celery's broker"),
        ({"HOOKLINE_REDIS_URL": CLUSTER}, "HOOKLINE_REDIS_URL names a Redis Cluster"),
        ({"HOOKLINE_STATE_SHARDS": "4"}, "HOOKLINE_STATE_SHARDS=4 needs HOOKLINE_BROKER_URL"),
        ({"REDIS_URL": CLUSTER, "HOOKLINE_BROKER_URL": "redis://b:1/0",
          "HOOKLINE_STATE_SHARDS": "0"}, "HOOKLINE_STATE_SHARDS"),
        ({"REDIS_URL": CLUSTER, "HOOKLINE_BROKER_URL": "redis://b:1/0",
          "HOOKLINE_STATE_SHARDS": "1000"}, "HOOKLINE_STATE_SHARDS"),
        ({"REDIS_URL": "cluster://c:7000"}, "redis\\+cluster://"),
        ({"REDIS_URL": CLUSTER, "HOOKLINE_BROKER_URL": "redis://b:1/0",
          "HOOKLINE_REDIS_WAIT_REPLICAS": "1"}, "HOOKLINE_REDIS_WAIT_REPLICAS='1'"),
    ],
)
def test_a_cluster_setting_hookline_cannot_use_is_refused_saying_why(env, said):
    with pytest.raises(ConfigError, match=said) as refused:
        load_settings(env)
    assert "s3cret-pass" not in str(refused.value)


@pytest.mark.parametrize("count", [2, 3, 16, 64])
def test_shard_tags_fall_one_in_each_equal_slot_range(count):
    """So that masters holding contiguous slot ranges (redis-cli --cluster create) each get
    their share of every structure's shards."""
    tags = keys.shard_tags("schedule", count)
    ranges = [key_slot(tag.encode()) * count // 16384 for tag in tags]
    assert ranges == list(range(count))
    assert len(set(tags)) == count


def test_one_shard_keeps_the_single_redis_key_names():
    (schedule,) = keys.schedule_shards(1)
    assert schedule.shared == keys.SCHEDULE_KEYS
    assert (schedule.wake, schedule.releasing) == (keys.WAKE_KEY, keys.RELEASING_KEY)
    assert schedule.by_endpoint("ep") == keys.schedule_endpoint_key("ep")
    (dlq,) = keys.dead_letter_shards(1)
    assert (dlq.entries, dlq.by_time) == (keys.DLQ_KEY, keys.DLQ_INDEX_KEY)
    assert dlq.by_reason("rejected") == keys.DLQ_REASON_KEY.format("rejected")
    assert keys.endpoint_index_keys(1) == (keys.ENDPOINT_INDEX,)


def test_an_endpoints_retries_index_and_count_share_one_slot():
    for shard in keys.schedule_shards(16):
        slots = {key_slot(key.encode()) for key in
                 (*shard.shared, shard.wake, shard.releasing, shard.by_endpoint("shop"))}
        assert len(slots) == 1
    assert keys.entry_shard("shop/evt-1", 16) == keys.endpoint_shard("shop", 16)
