"""What the audit reads on the driver: broker ids, checkpoints, segment lists; bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.log.checkpoints import LEADER_EPOCH_CHECKPOINT, REPLICATION_OFFSET_CHECKPOINT
from broker.log.epoch_entry import EpochEntry
from chaos.audit.data_dirs import AuditInputError, read_data_dirs
from chaos.audit.testing import BrokerDataDir
from proto.config.log_config import LogConfig
from proto.topic_partition import TopicPartition

TP = TopicPartition("orders", 1)


def _broker_dir(path: Path, broker: int) -> BrokerDataDir:
    d = BrokerDataDir(path, broker, LogConfig(segment_bytes=150))
    d.produce(TP, [f"v{i}" for i in range(12)], epoch=4, per_batch=4)
    d.high_watermarks[TP] = 8
    d.close()
    return d


def test_a_data_dir_yields_its_broker_replicas_and_checkpoints(tmp_path: Path) -> None:
    _broker_dir(tmp_path / "b7", 7)
    (tmp_path / "b7" / "lost+found").mkdir()  # not a partition directory: ignored
    (broker,) = read_data_dirs([tmp_path / "b7"])
    assert broker.broker == 7
    (replica,) = broker.replicas
    assert replica.topic_partition == TP
    assert replica.high_watermark == 8
    assert replica.recovery_point == 12
    assert replica.log_start_checkpoint is None
    assert replica.epoch_entries == (EpochEntry(4, 0),)
    assert [s.base_offset for s in replica.segments] == [0, 4, 8]  # one batch per segment
    assert all(s.size > 0 and s.path.name.endswith(".log") for s in replica.segments)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: None, "does not exist"),
        (lambda p: p.write_text("x"), "is not a directory"),
        (lambda p: p.mkdir(), "is not a broker data dir: it has no meta.properties"),
    ],
)
def test_a_dir_that_is_no_broker_data_dir_is_bad_input(
    tmp_path: Path, make: object, message: str
) -> None:
    path = tmp_path / "dir"
    make(path)  # type: ignore[operator]
    with pytest.raises(AuditInputError, match=message):
        read_data_dirs([path])


def test_a_corrupt_checkpoint_is_bad_input_naming_file_and_line(tmp_path: Path) -> None:
    _broker_dir(tmp_path / "b1", 1)
    (tmp_path / "b1" / REPLICATION_OFFSET_CHECKPOINT).write_text("0\n1\norders 1 x\n")
    with pytest.raises(AuditInputError, match=r"replication-offset-checkpoint, line 3"):
        read_data_dirs([tmp_path / "b1"])


def test_a_corrupt_epoch_checkpoint_is_bad_input(tmp_path: Path) -> None:
    _broker_dir(tmp_path / "b1", 1)
    (tmp_path / "b1" / TP.dir_name / LEADER_EPOCH_CHECKPOINT).write_text("0\n2\n0 0\n")
    with pytest.raises(AuditInputError, match="leader-epoch-checkpoint, line 4"):
        read_data_dirs([tmp_path / "b1"])


def test_two_dirs_of_one_broker_are_bad_input(tmp_path: Path) -> None:
    _broker_dir(tmp_path / "a", 3)
    _broker_dir(tmp_path / "b", 3)
    with pytest.raises(AuditInputError, match="both belong to broker 3"):
        read_data_dirs([tmp_path / "a", tmp_path / "b"])


def test_no_data_dirs_is_bad_input() -> None:
    with pytest.raises(AuditInputError, match="no data dirs"):
        read_data_dirs([])
