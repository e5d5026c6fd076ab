"""znode_reads: the one set of rules every reader of a partition state, a broker
registration or a committed offset follows (absent, malformed, other errors), and the one
behaviour for a malformed consumer offset (docs/zookeeper.md)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from kazoo.exceptions import ConnectionLoss, NoAuthError, NoNodeError

from proto.topic_partition import TopicPartition
from proto.zk.znode_reads import (
    ReadBatch,
    RegisteredBroker,
    broker_ids,
    consumer_offset_partitions,
    consumer_offset_read,
    consumer_offset_topics,
    partition_state_read,
    read_batch,
    registered_broker_read,
)
from proto.zk.znodes import (
    BrokerRegistration,
    PartitionState,
    PartitionStateData,
    ZkDataError,
    decode_consumer_offset,
    encode_broker_registration,
    encode_consumer_offset,
    encode_partition_state,
)

TP0, TP1, TP2 = (TopicPartition("t", p) for p in range(3))


def stat(version: int = 0, czxid: int = 0) -> SimpleNamespace:
    return SimpleNamespace(version=version, czxid=czxid)


def test_a_partition_state_is_decoded_with_its_version_absent_is_none() -> None:
    read = partition_state_read(TP0)
    assert read.path == "/brokers/topics/t/partitions/0/state"
    data = encode_partition_state(PartitionStateData(1, 4, (1, 2), 3))
    assert read.value((data, stat(version=7))) == PartitionState(1, 4, (1, 2), 3, 7)
    assert read.value(NoNodeError()) is None


def test_malformed_data_names_the_znode_and_other_errors_are_raised_as_they_are() -> None:
    read = partition_state_read(TP0)
    with pytest.raises(ZkDataError, match=r"^znode /brokers/topics/t/partitions/0/state: "):
        read.value((b"{not json", stat()))
    for error in (ConnectionLoss(), NoAuthError()):
        with pytest.raises(type(error)):
            read.value(error)


def test_a_registration_comes_with_its_czxid_as_the_broker_epoch() -> None:
    data = encode_broker_registration("h", 9091, 5)
    broker = registered_broker_read(3).value((data, stat(czxid=42)))
    assert broker == RegisteredBroker(BrokerRegistration("h", 9091, 5), 42)
    assert (broker.host, broker.port, broker.kafka_endpoint) == ("h", 9091, None)


def test_broker_ids_are_the_numeric_children_the_rest_is_ignored_with_a_reason() -> None:
    ids, ignored = broker_ids(["10", "2", "x", "٣"])
    assert ids == [2, 10]
    assert ignored == [
        "ignoring broker znode /brokers/ids/'x': not an id",
        "ignoring broker znode /brokers/ids/'٣': not an id",
    ]


def test_a_batch_separates_found_absent_and_malformed() -> None:
    reads = {tp: consumer_offset_read("g", tp) for tp in (TP0, TP1, TP2)}
    batch = read_batch(reads, [(b"5", stat()), NoNodeError(), (b"five", stat())], ["why"])
    assert batch.found == {TP0: 5}
    assert list(batch.malformed) == [TP2]
    assert str(batch.malformed[TP2]).startswith("znode /consumers/g/offsets/t/2: ")
    assert batch.ignored == ["why"]
    with pytest.raises(ZkDataError, match="/consumers/g/offsets/t/2"):
        batch.require()
    assert ReadBatch(found={TP0: 5}).require() == {TP0: 5}
    with pytest.raises(ConnectionLoss):
        read_batch(reads, [(b"5", stat()), ConnectionLoss(), NoNodeError()])


@pytest.mark.parametrize(
    "data", [b"", b"five", b"4.5", b"0x10", b"-1", b"-0042", b"1e3", b"\xff\xfe", b"4 2"]
)
def test_a_malformed_offset_is_an_error_never_no_offset(data: bytes) -> None:
    """The one behaviour: not a decimal integer >= 0 is malformed. Reading it as absent
    would let auto.offset.reset silently skip or replay the partition."""
    read = consumer_offset_read("g", TP1)
    with pytest.raises(ZkDataError, match=r"^znode /consumers/g/offsets/t/1: offset must be"):
        read.value((data, stat()))
    batch = read_batch({TP1: read}, [(data, stat())])
    assert batch.found == {}
    assert list(batch.malformed) == [TP1]


def test_an_offset_is_decimal_text_surrounding_whitespace_ignored() -> None:
    read = consumer_offset_read("g", TP0)
    assert read.path == "/consumers/g/offsets/t/0"
    assert read.value((b"42", stat())) == 42
    assert read.value((b" 0\n", stat())) == 0
    assert read.value(NoNodeError()) is None
    assert decode_consumer_offset(encode_consumer_offset(9_000_000_000)) == 9_000_000_000
    with pytest.raises(ValueError, match=">= 0"):
        encode_consumer_offset(-1)


def test_listing_offsets_leaves_out_illegal_topics_and_non_partitions_with_a_reason() -> None:
    topics, ignored = consumer_offset_topics("g", ["b", "a", "bad name"])
    assert topics == ["a", "b"]
    assert len(ignored) == 1
    assert ignored[0].startswith("ignoring znode /consumers/g/offsets/'bad name': illegal name")
    tps, ignored = consumer_offset_partitions("g", "t", ["10", "2", "x"])
    assert tps == [TopicPartition("t", 2), TopicPartition("t", 10)]
    assert ignored == ["ignoring znode /consumers/g/offsets/t/'x': not a partition"]
