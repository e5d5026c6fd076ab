"""A chaos run's transactions workload, without a cluster: the history lines of
transactions, the transactional producer's steps against a stand-in producer (what each
client error is recorded as), the open transactions read from history tails, the nemeses
of the transaction path against a stand-in ZooKeeper and backend, and what the runner and
the command line make of the workload."""

from __future__ import annotations

import argparse
import asyncio
import json
import random
from collections.abc import Callable, Collection, Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from kazoo.exceptions import NoNodeError

from chaos import nemesis as nemesis_module
from chaos.backend import BackendUnavailableError, ClusterBackend
from chaos.cli import _transaction_options_problem
from chaos.history_recorder import HistoryRecorder, TimelineRecorder
from chaos.nemesis import (
    NEMESES,
    TRANSACTION_DEFAULT_NEMESES,
    TRANSACTION_NEMESES,
    NemesisContext,
    NoTargetError,
    transaction_coordinator,
)
from chaos.open_transactions import OpenTransactions
from chaos.run_stats import run_stats, transaction_outcomes
from chaos.runner import (
    ABORT_CHECK_MS,
    RunSettings,
    cluster_overrides,
    resolve_nemeses,
    run_chaos,
    transactions_settle_s,
)
from chaos.transactional_workload import _Copier, _Transactions
from chaos.workload import TRANSACTIONS, WorkloadSpec
from client.consumer import ConsumerRecord
from client.producer import TransactionAbortableError, TransactionFencedError
from client.producer_config import RecordMetadata
from proto.coordinator.placement import partition_for
from proto.topic_partition import TRANSACTION_STATE_TOPIC, TopicPartition
from proto.zk import znodes

TPS = [TopicPartition(t, p) for t in ("chaos-0", "chaos-1") for p in range(3)]


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# -- the history lines ---------------------------------------------------------------------


def test_plain_lines_are_byte_for_byte_what_they_were(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("chaos.history_recorder.time.time", lambda: 1.5)
    with HistoryRecorder(tmp_path / "0.jsonl", 3) as h:
        h.ok("t", 0, "p3-17", 41)
        h.fail("t", None, "p3-18", key="k1")
        h.info("t", 1, "p3-19")
        h.read("t", 0, 41, "p3-17", session=2)
        h.read("t", 0, 42, None, isolation="read_uncommitted")
    assert (tmp_path / "0.jsonl").read_text().splitlines() == [
        '{"time":1.5,"process":3,"type":"ok","topic":"t","partition":0,"value":"p3-17","offset":41}',
        '{"time":1.5,"process":3,"type":"fail","topic":"t","partition":null,"value":"p3-18",'
        '"offset":null,"key":"k1"}',
        '{"time":1.5,"process":3,"type":"info","topic":"t","partition":1,"value":"p3-19",'
        '"offset":null}',
        '{"time":1.5,"process":3,"type":"read","topic":"t","partition":0,"value":"p3-17",'
        '"offset":41,"session":2}',
        '{"time":1.5,"process":3,"type":"read","topic":"t","partition":0,"value":null,'
        '"offset":42,"session":0}',
    ]


def test_transaction_lines_are_the_format_s(tmp_path: Path) -> None:
    """/work/plan's contract, docs/audit.md "Transactions": writes name their txn, steps
    have no topic, read_committed reads say so, a copier's reads name their txn."""
    with HistoryRecorder(tmp_path / "0.jsonl", 3) as h:
        h.step("begin", "p3-t4", "ok", timeout_ms=10000)
        h.ok("t", 0, "p3-17", 41, txn="p3-t4")
        h.info("t", 1, "p3-18", txn="p3-t4")
        h.fail("t", 2, "p3-19", txn="p3-t4")
        h.step("commit", "p3-t4", "ok")
        h.step("send_offsets", "c5-t3", "ok", group="g", offsets=[["in", 0, 124]])
        h.read("t", 0, 41, "p3-17", session=2, isolation="read_committed")
        h.read("in", 0, 123, "x", isolation="read_committed", txn="c5-t3")
    begin, ok, info, fail, commit, offsets, read, copied = _lines(tmp_path / "0.jsonl")
    assert {k: v for k, v in begin.items() if k != "time"} == {
        "process": 3, "type": "ok", "f": "begin", "txn": "p3-t4", "timeout_ms": 10000,
    }  # fmt: skip
    assert "topic" not in commit
    assert (commit["f"], commit["txn"]) == ("commit", "p3-t4")
    assert ok == {**ok, "type": "ok", "topic": "t", "offset": 41, "txn": "p3-t4"}
    assert (info["txn"], info["offset"], fail["txn"]) == ("p3-t4", None, "p3-t4")
    assert offsets == {**offsets, "group": "g", "offsets": [["in", 0, 124]], "txn": "c5-t3"}
    assert read == {**read, "isolation": "read_committed", "session": 2}
    assert "txn" not in read
    assert copied == {**copied, "isolation": "read_committed", "txn": "c5-t3"}

    from chaos.audit.history import HistoryOp, HistoryRead, TxnStep, parse_history_line

    texts = (tmp_path / "0.jsonl").read_text().splitlines()
    parsed = [parse_history_line(i, text) for i, text in enumerate(texts, start=1)]
    assert [type(p) for p in parsed] == [
        TxnStep, HistoryOp, HistoryOp, HistoryOp, TxnStep, TxnStep, HistoryRead, HistoryRead,
    ]  # fmt: skip


# -- the transactional producer ------------------------------------------------------------


class _Future:
    """A record's handle, settled at once."""

    def __init__(self, tp: TopicPartition, offset: int, error: Exception | None) -> None:
        self.tp, self.offset, self.error = tp, offset, error

    def done(self) -> bool:
        return True

    def exception(self) -> Exception | None:
        return self.error

    def result(self) -> RecordMetadata:
        assert self.error is None
        return RecordMetadata(self.tp.topic, self.tp.partition, self.offset, 0)

    def add_done_callback(self, fn: Callable[[Any], object]) -> None:
        asyncio.get_running_loop().call_soon(fn, self)


class _Producer:
    """What the transactional producer asks of ``client.producer.Producer``; each call's
    failure is the test's to choose."""

    def __init__(self, **failures: Any) -> None:
        self.failures = {k: list(v) if isinstance(v, list) else [v] for k, v in failures.items()}
        self.calls: list[str] = []
        self.offset = 0

    def _maybe_fail(self, call: str) -> None:
        self.calls.append(call)
        pending = self.failures.get(call)
        if pending:
            error = pending.pop(0)
            if error is not None:
                raise error

    def begin_transaction(self) -> None:
        self._maybe_fail("begin")

    async def send(self, topic: str, value: bytes, *, partition: int) -> _Future:
        self._maybe_fail("send")
        self.offset += 1
        bad = self.failures.get("record")
        return _Future(TopicPartition(topic, partition), self.offset, bad.pop(0) if bad else None)

    async def flush(self) -> None:
        await asyncio.sleep(0)

    async def commit_transaction(self) -> None:
        self._maybe_fail("commit")

    async def abort_transaction(self) -> None:
        self._maybe_fail("abort")


def _transactions(tmp_path: Path, abort_probability: float = 0.0) -> _Transactions:
    args = argparse.Namespace(
        process=3,
        transaction_records=3,
        abort_probability=abort_probability,
        transaction_timeout_ms=10000,
        rate=1000.0,
    )
    history = HistoryRecorder(tmp_path / "3.jsonl", 3)
    return _Transactions(args, history, iter(TPS * 100), random.Random(3))


def _one(tmp_path: Path, producer: _Producer, **kw: Any) -> tuple[bool, list[dict[str, Any]]]:
    transactions = _transactions(tmp_path, **kw)

    async def run() -> bool:
        go_on = await transactions.transaction(cast(Any, producer))
        await asyncio.sleep(0.01)  # late callbacks: none may write a second line
        return go_on

    with transactions.history:
        go_on = asyncio.run(run())
    return go_on, _lines(tmp_path / "3.jsonl")


def _shape(lines: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """Each line as (what, type): the step's f, else ``write``."""
    return [(line.get("f", "write"), line["type"]) for line in lines]


def test_a_committed_transaction_spans_partitions_and_its_writes_precede_its_commit(
    tmp_path: Path,
) -> None:
    go_on, lines = _one(tmp_path, _Producer())
    assert go_on
    assert _shape(lines) == [("begin", "ok")] + [("write", "ok")] * 3 + [("commit", "ok")]
    assert {line["txn"] for line in lines} == {"p3-t0"}
    assert [(w["topic"], w["partition"]) for w in lines[1:4]] == [
        (tp.topic, tp.partition) for tp in TPS[:3]
    ]
    assert [w["value"] for w in lines[1:4]] == ["p3-0", "p3-1", "p3-2"]
    assert lines[0]["timeout_ms"] == 10000


def test_the_abort_probability_aborts_on_purpose(tmp_path: Path) -> None:
    go_on, lines = _one(tmp_path, _Producer(), abort_probability=1.0)
    assert go_on
    assert _shape(lines)[-1] == ("abort", "ok")


def test_a_failed_record_aborts_and_the_producer_goes_on(tmp_path: Path) -> None:
    producer = _Producer(record=[None, RuntimeError("delivery timed out")])
    go_on, lines = _one(tmp_path, producer)
    assert go_on
    assert _shape(lines) == [
        ("begin", "ok"), ("write", "ok"), ("write", "info"), ("write", "ok"), ("abort", "ok"),
    ]  # fmt: skip
    assert "commit" not in producer.calls


def test_a_send_refused_is_a_failed_write_and_an_abort(tmp_path: Path) -> None:
    producer = _Producer(
        send=[None, TransactionFencedError("fenced")], abort=[TransactionFencedError("fenced")]
    )
    go_on, lines = _one(tmp_path, producer)
    assert not go_on  # fenced: a new producer
    # The refused send is recorded at once, the first write once it is acknowledged; the
    # abort is not this process's to know: the coordinator that fenced it aborts it.
    assert _shape(lines) == [("begin", "ok"), ("write", "fail"), ("write", "ok"), ("abort", "info")]


def test_a_commit_refused_as_abortable_is_a_failed_commit_then_an_abort(tmp_path: Path) -> None:
    producer = _Producer(commit=TransactionAbortableError("a record failed; abort it"))
    go_on, lines = _one(tmp_path, producer)
    assert go_on
    assert _shape(lines)[-2:] == [("commit", "fail"), ("abort", "ok")]


def test_a_fenced_commit_certainly_did_not_commit_and_the_producer_is_replaced(
    tmp_path: Path,
) -> None:
    go_on, lines = _one(tmp_path, _Producer(commit=TransactionFencedError("fenced")))
    assert not go_on
    assert _shape(lines)[-1] == ("commit", "fail")


def test_a_commit_of_unknown_outcome_is_info_and_tried_once_more(tmp_path: Path) -> None:
    timeout = RuntimeError("EndTxn not done within max_block_ms")
    go_on, lines = _one(tmp_path, _Producer(commit=[timeout, None]))
    assert go_on
    assert _shape(lines)[-2:] == [("commit", "info"), ("commit", "ok")]
    go_on, lines = _one(tmp_path / "again", _Producer(commit=[timeout, timeout]))
    assert not go_on  # still unknown: a new producer's init_transactions settles it
    assert _shape(lines)[-2:] == [("commit", "info"), ("commit", "info")]


def test_an_abort_that_times_out_is_info(tmp_path: Path) -> None:
    producer = _Producer(abort=RuntimeError("no coordinator found"))
    go_on, lines = _one(tmp_path, producer, abort_probability=1.0)
    assert not go_on
    assert _shape(lines)[-1] == ("abort", "info")


def test_a_begin_the_client_refuses_began_nothing(tmp_path: Path) -> None:
    go_on, lines = _one(tmp_path, _Producer(begin=TransactionFencedError("fenced")))
    assert not go_on
    assert _shape(lines) == [("begin", "fail")]


def test_each_transaction_has_its_own_id_and_values_stay_unique(tmp_path: Path) -> None:
    transactions = _transactions(tmp_path)

    async def run() -> None:
        for _ in range(3):
            assert await transactions.transaction(cast(Any, _Producer()))

    with transactions.history:
        asyncio.run(run())
    lines = _lines(tmp_path / "3.jsonl")
    assert [line["txn"] for line in lines if line.get("f") == "begin"] == [
        "p3-t0", "p3-t1", "p3-t2",
    ]  # fmt: skip
    values = [line["value"] for line in lines if "value" in line]
    assert len(values) == len(set(values)) == 9


def test_outcomes_are_decided_as_the_audit_decides_them(tmp_path: Path) -> None:
    def step(f: str, txn: str, kind: str) -> dict[str, Any]:
        return {"time": 1.0, "process": 0, "type": kind, "f": f, "txn": txn}

    history = [
        step("begin", "a", "ok"), step("commit", "a", "ok"),
        step("begin", "b", "ok"), step("abort", "b", "ok"),
        step("begin", "c", "ok"), step("commit", "c", "fail"), step("abort", "c", "info"),
        step("begin", "d", "ok"), step("commit", "d", "info"),
        step("begin", "e", "ok"), step("commit", "e", "info"), step("commit", "e", "ok"),
        step("begin", "f", "ok"),
    ]  # fmt: skip
    assert transaction_outcomes(history) == {"committed": 2, "aborted": 2, "unknown": 2}
    # The steps are no acknowledgements: only the write is.
    write = {"time": 1.0, "process": 0, "type": "ok", "topic": "t", "partition": 0,
             "value": "p0-0", "offset": 0, "txn": "a"}  # fmt: skip
    (tmp_path / "history.jsonl").write_text(
        "".join(json.dumps(h) + "\n" for h in [*history, write])
    )
    stats = run_stats(tmp_path)
    assert stats.acked_total == 1
    assert "transactions: 2 committed, 2 aborted, 2 of unknown outcome" in stats.summary()


class _Copying(_Producer):
    async def send_offsets_to_transaction(
        self, offsets: dict[TopicPartition, int], group_id: str
    ) -> None:
        self._maybe_fail("send_offsets")
        self.offsets = (dict(offsets), group_id)


class _Consumer:
    def __init__(self) -> None:
        self.sought: dict[TopicPartition, int] = {}

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.sought[tp] = offset


def _copy(
    tmp_path: Path, producer: _Copying, abort_probability: float = 0.0
) -> tuple[bool, list[dict[str, Any]], _Consumer]:
    args = argparse.Namespace(
        process=5, transaction_records=3, abort_probability=abort_probability,
        transaction_timeout_ms=10000, copy_topic="copies", partitions=3, group="chaos-copiers",
    )  # fmt: skip
    copier = _Copier(args, HistoryRecorder(tmp_path / "5.jsonl", 5), iter(()), random.Random(5))
    records = [
        ConsumerRecord("chaos-0", 1, 40, None, b"p0-7", 0),
        ConsumerRecord("chaos-0", 1, 42, None, b"p0-9", 0),  # 41: a marker
        ConsumerRecord("chaos-1", 2, 7, None, b"p1-3", 0),
    ]
    consumer = _Consumer()

    async def run() -> bool:
        go_on = await copier.copy_records(cast(Any, producer), cast(Any, consumer), records, 4)
        await asyncio.sleep(0.01)
        return go_on

    with copier.history:
        go_on = asyncio.run(run())
    return go_on, _lines(tmp_path / "5.jsonl"), consumer


def test_a_copier_s_transaction_holds_its_reads_writes_and_the_next_offsets(
    tmp_path: Path,
) -> None:
    producer = _Copying()
    go_on, lines, consumer = _copy(tmp_path, producer)
    assert go_on
    assert {line["txn"] for line in lines} == {"c5-t0"}
    reads = [line for line in lines if line["type"] == "read"]
    assert [(r["topic"], r["partition"], r["offset"]) for r in reads] == [
        ("chaos-0", 1, 40), ("chaos-0", 1, 42), ("chaos-1", 2, 7),
    ]  # fmt: skip
    assert {(r["isolation"], r["session"]) for r in reads} == {("read_committed", 4)}
    writes = [line for line in lines if line.get("topic") == "copies"]
    assert [(w["partition"], w["value"]) for w in writes] == [(1, "c5-0"), (1, "c5-1"), (2, "c5-2")]
    [sent] = [line for line in lines if line.get("f") == "send_offsets"]
    assert (sent["group"], sent["offsets"]) == (
        "chaos-copiers",
        [["chaos-0", 1, 43], ["chaos-1", 2, 8]],
    )
    assert producer.offsets == (
        {TopicPartition("chaos-0", 1): 43, TopicPartition("chaos-1", 2): 8}, "chaos-copiers",
    )  # fmt: skip
    assert _shape(lines)[0] == ("begin", "ok")
    assert _shape(lines)[-1] == ("commit", "ok")
    assert consumer.sought == {}


def test_an_aborted_copy_reads_its_records_again(tmp_path: Path) -> None:
    go_on, lines, consumer = _copy(tmp_path, _Copying(), abort_probability=1.0)
    assert go_on
    assert _shape(lines)[-1] == ("abort", "ok")
    assert consumer.sought == {TopicPartition("chaos-0", 1): 40, TopicPartition("chaos-1", 2): 7}


def test_offsets_that_may_not_be_in_the_transaction_abort_it(tmp_path: Path) -> None:
    producer = _Copying(send_offsets=RuntimeError("TxnOffsetCommit not done"))
    go_on, lines, _ = _copy(tmp_path, producer)
    assert go_on
    assert ("send_offsets", "info") in _shape(lines)
    assert _shape(lines)[-1] == ("abort", "ok")
    fenced = _Copying(
        send_offsets=TransactionFencedError("fenced"), abort=TransactionFencedError("f")
    )
    go_on, lines, _ = _copy(tmp_path / "fenced", fenced)
    assert not go_on
    assert ("send_offsets", "fail") in _shape(lines)


# -- open transactions ---------------------------------------------------------------------


def _write(path: Path, *lines: dict[str, Any], raw: str = "") -> None:
    with path.open("a") as f:
        f.write("".join(json.dumps(line, separators=(",", ":")) + "\n" for line in lines) + raw)


def _begin(txn: str, t: float = 1.0) -> dict[str, Any]:
    return {"time": t, "process": 0, "type": "ok", "f": "begin", "txn": txn}


def _ok(txn: str, tp: TopicPartition, t: float = 1.0) -> dict[str, Any]:
    return {"time": t, "process": 0, "type": "ok", "topic": tp.topic,
            "partition": tp.partition, "value": "v", "offset": 1, "txn": txn}  # fmt: skip


def _end(txn: str, f: str = "commit", t: float = 2.0) -> dict[str, Any]:
    return {"time": t, "process": 0, "type": "ok", "f": f, "txn": txn}


def test_a_transaction_is_open_from_its_first_acknowledged_write_until_its_end(
    tmp_path: Path,
) -> None:
    path = tmp_path / "0.jsonl"
    watch = OpenTransactions({0: path})
    assert watch.poll() == {}  # no file yet
    _write(path, _begin("p0-t0"), _ok("p0-t0", TPS[0]), _end("p0-t0"), _begin("p0-t1"))
    assert watch.poll() == {}  # begun, nothing written yet
    _write(path, _ok("p0-t1", TPS[1]), raw='{"time": 3, "process": 0, "type": "ok", "to')
    [found] = watch.poll().values()
    assert (found.txn, found.partitions) == ("p0-t1", [TPS[1]])
    _write(path, raw=f'pic": "{TPS[2].topic}", "partition": 2, "txn": "p0-t1"}}\n')
    assert watch.poll()["p0-t1"].partitions == [TPS[1], TPS[2]]  # the torn line, finished
    _write(path, _end("p0-t1", "abort", t=5.0))
    assert watch.poll() == {}
    assert watch.ended == {"p0-t0": 2.0, "p0-t1": 5.0}


def test_a_long_history_is_read_from_near_its_end(tmp_path: Path) -> None:
    path = tmp_path / "0.jsonl"
    for n in range(200):
        _write(path, _begin(f"p0-t{n}"), _ok(f"p0-t{n}", TPS[0]), _end(f"p0-t{n}"))
    _write(path, _begin("p0-t200"), _ok("p0-t200", TPS[3]))
    watch = OpenTransactions({0: path}, tail_bytes=1000)
    assert list(watch.poll()) == ["p0-t200"]
    assert "p0-t0" not in watch.ended  # the start of the file is not read


# -- the nemeses of the transaction path ---------------------------------------------------


class _Answer:
    def __init__(self, value: Any) -> None:
        self.value = value

    def get(self) -> Any:
        if isinstance(self.value, Exception):
            raise self.value
        return self.value


class _Stat:
    version = 0


class _Zk:
    """The znodes the nemeses read: topic assignments and partition states."""

    def __init__(self, leaders: dict[TopicPartition, int], transaction_partitions: int) -> None:
        self.data: dict[str, bytes] = {}
        if transaction_partitions:
            self.data[znodes.topic_path(TRANSACTION_STATE_TOPIC)] = znodes.encode_topic_assignment(
                {p: [1, 2, 3] for p in range(transaction_partitions)}
            )
        for tp, leader in leaders.items():
            self.data[znodes.partition_state_path(tp)] = znodes.encode_partition_state(
                znodes.PartitionStateData(leader, 4, (1, 2, 3), 1)
            )

    def get(self, path: str) -> tuple[bytes, _Stat]:
        if path not in self.data:
            raise NoNodeError(path)
        return self.data[path], _Stat()

    def get_async(self, path: str) -> _Answer:
        try:
            return _Answer(self.get(path))
        except NoNodeError as e:
            return _Answer(e)


class _Backend(ClusterBackend):
    """Three brokers; what the nemeses do to them is recorded, nothing more."""

    name = "local"

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []
        self.down: set[int] = set()

    def broker_ids(self) -> list[int]:
        return [1, 2, 3]

    def bootstrap_servers(self) -> str:
        return "localhost:1"

    def zookeeper_connect(self) -> str:
        return "localhost:2"

    def kill(self, broker_id: int) -> None:
        self.calls.append(("kill", broker_id))
        self.down.add(broker_id)

    def stop(self, broker_id: int) -> None:
        raise NotImplementedError

    def start(self, broker_id: int) -> None:
        self.calls.append(("start", broker_id))
        self.down.discard(broker_id)

    def pause(self, broker_id: int) -> None:
        self.calls.append(("pause", broker_id))

    def resume(self, broker_id: int) -> None:
        self.calls.append(("resume", broker_id))

    def is_running(self, broker_id: int) -> bool:
        return broker_id not in self.down

    def tear_segment(self, broker_id: int, rng: random.Random) -> str:
        raise NotImplementedError

    def zookeeper_session(self, broker_id: int) -> tuple[int, bytes] | None:
        return None

    def stop_cluster(self) -> None:
        raise NotImplementedError

    def copy_data_dirs(self, into: Path, topics: Collection[str] | None = None) -> dict[int, Path]:
        raise NotImplementedError

    def copy_logs(self, into: Path) -> None:
        raise NotImplementedError


IDS = {0: "chaos-txn-0", 1: "chaos-txn-1"}


def _state_tp(transactional_id: str, partitions: int = 50) -> TopicPartition:
    return TopicPartition(TRANSACTION_STATE_TOPIC, partition_for(transactional_id, partitions))


@pytest.fixture
def timeline(tmp_path: Path) -> Iterator[TimelineRecorder]:
    recorder = TimelineRecorder(tmp_path / "timeline.jsonl")
    yield recorder
    recorder.close()


def _context(
    zk: _Zk,
    backend: _Backend,
    timeline: TimelineRecorder,
    history_parts: Path | None = None,
    ids: dict[int, str] = IDS,
) -> NemesisContext:
    return NemesisContext(
        backend, cast(Any, zk), TPS, timeline, 1.0, set(), frozenset(), ids, history_parts
    )


def test_the_coordinator_is_the_leader_of_the_id_s_partition_as_brokers_place_it() -> None:
    leaders = {_state_tp("chaos-txn-0"): 2, _state_tp("chaos-txn-1"): 3}
    zk = _Zk(leaders, 50)
    assert transaction_coordinator(cast(Any, zk), "chaos-txn-0") == (_state_tp("chaos-txn-0"), 2)
    # The topic's own partition count, whatever the brokers' default.
    small = _Zk({_state_tp("chaos-txn-0", 7): 1}, 7)
    assert transaction_coordinator(cast(Any, small), "chaos-txn-0") == (
        _state_tp("chaos-txn-0", 7), 1,
    )  # fmt: skip
    assert transaction_coordinator(cast(Any, _Zk({}, 50)), "chaos-txn-0")[1] is None
    with pytest.raises(NoTargetError, match="no __transaction_state topic"):
        transaction_coordinator(cast(Any, _Zk({}, 0)), "chaos-txn-0")


def test_kill_txn_coordinator_kills_the_picked_producer_s_coordinator_and_starts_it(
    timeline: TimelineRecorder,
) -> None:
    zk = _Zk({_state_tp("chaos-txn-0"): 2, _state_tp("chaos-txn-1"): 3}, 50)
    backend = _Backend()
    ctx = _context(zk, backend, timeline)
    fault = NEMESES["kill-txn-coordinator"].strike(ctx, 0.9)  # the second producer
    assert (fault.target, backend.calls) == (3, [("kill", 3)])
    assert fault.detail == f"coordinator of chaos-txn-1, {_state_tp('chaos-txn-1')}"
    fault.heal()
    assert backend.calls[-1] == ("start", 3)
    [kill, start] = _lines(timeline.path)
    assert {k: kill[k] for k in ("f", "target", "nemesis", "transactional_id", "tp")} == {
        "f": "kill", "target": 3, "nemesis": "kill-txn-coordinator",
        "transactional_id": "chaos-txn-1", "tp": str(_state_tp("chaos-txn-1")),
    }  # fmt: skip
    assert start["f"] == "start"
    # The picked producer's coordinator is down: the next producer's.
    backend.down.add(3)
    assert NEMESES["kill-txn-coordinator"].strike(ctx, 0.9).target == 2
    backend.down.add(2)
    with pytest.raises(NoTargetError, match="no running transaction coordinator"):
        NEMESES["kill-txn-coordinator"].strike(ctx, 0.9)


def test_pause_txn_coordinator_freezes_it_past_the_session_timeout(
    timeline: TimelineRecorder,
) -> None:
    zk = _Zk({_state_tp("chaos-txn-0"): 2, _state_tp("chaos-txn-1"): 3}, 50)
    backend = _Backend()
    ctx = _context(zk, backend, timeline)
    nemesis = NEMESES["pause-txn-coordinator"]
    assert nemesis.hold_s(2.0, 3.0) == NEMESES["pause"].hold_s(2.0, 3.0) > 3.0
    fault = nemesis.strike(ctx, 0.0)
    assert (fault.target, ctx.paused, backend.calls) == (2, {2}, [("pause", 2)])
    fault.heal()
    assert (ctx.paused, backend.calls[-1]) == (set(), ("resume", 2))
    assert _lines(timeline.path)[0]["transactional_id"] == "chaos-txn-0"


def test_kill_leader_mid_txn_kills_the_leader_of_a_partition_an_open_transaction_wrote(
    tmp_path: Path, timeline: TimelineRecorder
) -> None:
    parts = tmp_path / "history.d"
    parts.mkdir()
    _write(parts / "0.jsonl", _begin("p0-t0"), _ok("p0-t0", TPS[0]), _end("p0-t0"))
    _write(parts / "1.jsonl", _begin("p1-t7"), _ok("p1-t7", TPS[4]))
    zk = _Zk({TPS[0]: 1, TPS[4]: 3}, 50)
    backend = _Backend()
    fault = NEMESES["kill-leader-mid-txn"].strike(_context(zk, backend, timeline, parts), 0.5)
    assert (fault.target, backend.calls) == (3, [("kill", 3)])
    assert fault.detail.startswith("mid-txn: p1-t7 open")
    [kill] = _lines(timeline.path)
    assert (kill["txn"], kill["tp"], kill["moment"]) == ("p1-t7", str(TPS[4]), "mid-txn")


def test_kill_leader_mid_txn_without_an_open_transaction_kills_a_leader_and_says_so(
    tmp_path: Path, timeline: TimelineRecorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(nemesis_module._KillLeaderMidTxn, "WAIT_S", 0.05)
    parts = tmp_path / "history.d"
    parts.mkdir()
    zk = _Zk(dict.fromkeys(TPS, 2), 50)
    backend = _Backend()
    fault = NEMESES["kill-leader-mid-txn"].strike(_context(zk, backend, timeline, parts), 0.5)
    assert fault.target == 2
    assert "no open transaction seen" in fault.detail
    assert _lines(timeline.path)[0]["moment"] == "no-open-txn-seen"


def test_the_transaction_path_s_nemeses_need_the_transactions_workload(tmp_path: Path) -> None:
    assert set(TRANSACTION_NEMESES) == {
        "kill-txn-coordinator", "pause-txn-coordinator", "kill-leader-mid-txn",
    }  # fmt: skip
    assert set(TRANSACTION_NEMESES) <= set(TRANSACTION_DEFAULT_NEMESES)
    backend = _Backend()
    assert not set(TRANSACTION_NEMESES) & set(resolve_nemeses(["all"], backend))
    assert set(TRANSACTION_NEMESES) <= set(resolve_nemeses(["all"], backend, transactions=True))
    with pytest.raises(BackendUnavailableError, match="--workload transactions"):
        resolve_nemeses(["kill", "kill-txn-coordinator"], backend)
    with pytest.raises(BackendUnavailableError, match="--workload transactions"):
        run_chaos(RunSettings(out=tmp_path / "run", nemeses=["pause-txn-coordinator"]))
    assert not (tmp_path / "run").exists()  # refused before anything started
    with pytest.raises(BackendUnavailableError, match="unknown workload"):
        run_chaos(RunSettings(out=tmp_path / "run", workload="exactly-once"))


def test_no_transactional_producer_means_no_target(timeline: TimelineRecorder) -> None:
    ctx = _context(_Zk({}, 50), _Backend(), timeline, ids={})
    for name in TRANSACTION_NEMESES:
        with pytest.raises(NoTargetError, match="--workload transactions"):
            NEMESES[name].strike(ctx, 0.0)


# -- the run and the command line ----------------------------------------------------------


def test_the_end_of_a_run_waits_out_the_timeout_and_the_abort_check(tmp_path: Path) -> None:
    settings = RunSettings(out=tmp_path, workload=TRANSACTIONS, transaction_timeout_ms=5000)
    key = "transaction.abort.timed.out.transaction.cleanup.interval.ms"
    assert cluster_overrides(settings)[key] == str(ABORT_CHECK_MS)
    assert key not in cluster_overrides(RunSettings(out=tmp_path))
    assert transactions_settle_s(settings, own_cluster=True) == 5 + ABORT_CHECK_MS / 1000 + 2
    # A cluster it was given: its interval is not known, Kafka's default (10 s) is assumed.
    assert transactions_settle_s(settings, own_cluster=False) == 5 + 10 + 2
    slower = RunSettings(
        out=tmp_path, workload=TRANSACTIONS, transaction_timeout_ms=5000,
        extra_overrides={key: "4000"},
    )  # fmt: skip
    assert transactions_settle_s(slower, own_cluster=True) == 5 + 4 + 2


def test_the_workload_spec_names_its_transactional_ids_and_isolation() -> None:
    plain = WorkloadSpec("b", "z", ["t"], 3, producers=2)
    assert (plain.transactional_ids(), plain.isolation_level) == ({}, "read_uncommitted")
    txn = WorkloadSpec("b", "z", ["t"], 3, producers=2, workload=TRANSACTIONS)
    assert txn.transactional_ids() == {0: "chaos-txn-0", 1: "chaos-txn-1"}
    assert txn.isolation_level == "read_committed"
    assert txn.copier_count == 0  # no copy topic: no copier
    copying = WorkloadSpec(
        "b", "z", ["t"], 3, producers=2, workload=TRANSACTIONS, copiers=1, copy_topic="c"
    )
    assert copying.transactional_ids() == {0: "chaos-txn-0", 1: "chaos-txn-1", 2: "chaos-txn-2"}
    assert WorkloadSpec("b", "z", ["t"], 3, copiers=1, copy_topic="c").copier_count == 0


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (["--workload", "transactions", "--transaction-records", "3"], None),
        (["--transaction-records", "3"], "--transaction-records needs --workload transactions"),
        (["--workload", "transactions", "--transaction-records", "0"], "a number > 0"),
        (["--workload", "transactions", "--abort-probability", "1.5"], "from 0 to 1"),
        (["--workload", "transactions", "--transaction-timeout-ms", "0"], "a number > 0"),
        (["--copiers", "1"], "--copiers needs --workload transactions"),
        (["--workload", "transactions", "--copiers", "-1"], "a number >= 0"),
    ],
)
def test_the_transaction_options(argv: list[str], problem: str | None) -> None:
    from client.cli.main import build_parser

    args = build_parser(["chaos", "run"]).parse_args(["chaos", "run", *argv])
    found = _transaction_options_problem(args)
    assert found == problem if problem is None else problem in (found or "")
