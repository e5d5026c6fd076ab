"""KIP-578's ``max.partitions`` and ``max.broker.partitions``: a request past either is
refused POLICY_VIOLATION with the numbers, a huge one before its partitions are placed."""

from __future__ import annotations

import pytest

from broker.metadata_cache import MetadataCache, PartitionInfo
from broker.partition_limits import POLICY_VIOLATION, PartitionBudget, PartitionLimitError
from proto.config.broker_config import DEFAULT_MAX_BROKER_PARTITIONS, BrokerConfig
from proto.config.describe_configs import builtin_broker_defaults
from proto.topic_partition import TopicPartition


def budget(max_partitions: int = 100, max_broker: int = 10) -> PartitionBudget:
    # Two partitions exist: one on brokers 1 and 2, one on broker 1.
    return PartitionBudget.of(max_partitions, max_broker, [(1, 2), (1,)])


def test_the_existing_partitions_are_counted() -> None:
    counted = budget()
    assert counted.partitions == 2
    assert dict(counted.replicas) == {1: 2, 2: 1}


def test_a_request_past_max_partitions_is_refused_before_it_is_placed() -> None:
    with pytest.raises(PartitionLimitError) as raised:
        budget(max_partitions=1000).precheck("topic 't'", 1_000_000, 1, [1, 2, 3])
    assert raised.value.code == POLICY_VIOLATION == 44
    assert str(raised.value) == (
        "topic 't': 1000000 new partitions would take the cluster to 1000002 partitions, "
        "more than max.partitions (1000)"
    )
    budget(max_partitions=100).precheck("topic 't'", 98, 0, ())


def test_a_request_that_cannot_fit_any_placement_is_refused_by_the_average() -> None:
    # 3 live brokers hold 3 replicas; 9 more partitions x 3 replicas: 30 / 3 = 10 fit.
    budget(max_broker=10).precheck("topic 't'", 9, 3, [1, 2, 3])
    with pytest.raises(PartitionLimitError, match=r"at least 11 partition replicas on a broker"):
        budget(max_broker=10).precheck("topic 't'", 10, 3, [1, 2, 3])
    with pytest.raises(PartitionLimitError, match=r"max.broker.partitions \(10\)"):
        budget(max_partitions=2**31 - 1, max_broker=10).precheck("t", 1_000_000, 1, [1, 2, 3])


def test_an_assignment_is_checked_per_broker_and_counted_for_the_next_topic() -> None:
    counted = budget(max_broker=4)
    with pytest.raises(PartitionLimitError, match="would put 5 partition replicas on broker 1"):
        counted.check("topic 'a'", {0: [1], 1: [1], 2: [1]})
    counted.admit("topic 'a'", {0: [1, 3], 1: [2, 3]})
    assert counted.partitions == 4
    assert dict(counted.replicas) == {1: 3, 2: 2, 3: 2}
    with pytest.raises(PartitionLimitError, match="broker 1"):
        counted.admit("topic 'b'", {0: [1], 1: [1]})
    assert counted.partitions == 4  # a refused topic is not counted


def test_the_metadata_cache_lists_every_partitions_replicas() -> None:
    cache = MetadataCache()
    cache.add_partition(TopicPartition("a", 0), PartitionInfo(1, 0, (1, 2), (1, 2)))
    cache.add_partition(TopicPartition("b", 0), PartitionInfo(2, 0, (2,), (2,)))
    assert sorted(cache.all_replicas()) == [(1, 2), (2,)]


def test_the_limits_are_broker_properties_described_with_their_defaults() -> None:
    config = BrokerConfig.from_properties(
        {
            "broker.id": "1",
            "zookeeper.connect": "localhost:2181",
            "log.dirs": "/tmp/x",
            "max.partitions": "5000",
            "max.broker.partitions": "300",
            "zookeeper.jute.maxbuffer": "4194304",
        }
    )
    assert (config.max_partitions, config.max_broker_partitions) == (5000, 300)
    assert config.zookeeper_jute_maxbuffer == 4_194_304
    with pytest.raises(ValueError, match=r"max\.broker\.partitions"):
        BrokerConfig.from_properties(
            {
                "broker.id": "1",
                "zookeeper.connect": "localhost:2181",
                "log.dirs": "/tmp/x",
                "max.broker.partitions": "0",
            }
        )
    defaults = builtin_broker_defaults()
    assert defaults["max.broker.partitions"] == str(DEFAULT_MAX_BROKER_PARTITIONS)
    assert defaults["max.partitions"] == str(2**31 - 1)
    assert defaults["zookeeper.jute.maxbuffer"] == "1048575"
