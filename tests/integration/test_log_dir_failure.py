"""A log dir that fails with an I/O error goes offline, as Kafka's does.

Broker 1's data dir is a small tmpfs. Filling it makes the leader's next append fail with
ENOSPC: the broker takes the dir offline (every partition answers KAFKA_STORAGE_ERROR,
nothing more is written there), tells the controller through
``/log_dir_event_notification``, and the controller moves the leadership to another ISR
member within seconds. Nothing acknowledged is lost. Once space is freed and the broker
restarts, recovery cuts the torn tail and the broker rejoins the ISR.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from proto.topic_partition import TopicPartition
from proto.zk import znodes
from tests.cluster import running_cluster
from tests.helpers import wait_for
from tests.load import AcksAllLoad, check_acked_records_survive

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

TMPFS_BYTES = 8 * 1024 * 1024
FREE_AFTER_FILLING = 64 * 1024
"""What the filler leaves free: a few hundred acknowledged batches, then ENOSPC."""
FILL_WITHIN_S = 60.0
MOVE_WITHIN_S = 15.0
"""The failure is seen at the next append; then one notification, one controller event and
one state write. Generous for a loaded 2-core machine."""


@contextmanager
def small_tmpfs(path: Path, size: int) -> Iterator[Path]:
    """A tmpfs of ``size`` bytes mounted at ``path`` (root only; skipped elsewhere)."""
    path.mkdir(parents=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs for the disk-full test: {mounted.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(directory: Path, leave: int) -> Path:
    """A file taking all but ``leave`` bytes of ``directory``'s file system."""
    stats = os.statvfs(directory)
    filler = directory / "filler"
    with filler.open("wb") as out:
        out.truncate(0)
        remaining = stats.f_bavail * stats.f_frsize - leave
        chunk = b"\0" * (1 << 20)
        while remaining > 0:
            out.write(chunk[: min(len(chunk), remaining)])
            remaining -= len(chunk)
    return filler


def test_a_full_disk_takes_the_log_dir_offline_moves_leadership_and_loses_nothing(
    zk_client: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    tp = TopicPartition("disk", 0)
    with (
        small_tmpfs(tmp_path / "broker-1", TMPFS_BYTES) as data_dir,
        running_cluster(zk_client, zk_connect, tmp_path) as cluster,
    ):
        cluster.create_topic(tp.topic, {0: [1, 2, 3]}, {"min.insync.replicas": "2"})
        assert cluster.wait_for_leader(tp) == 1
        cluster.wait_for_isr(tp, {1, 2, 3})
        filler = fill(data_dir, FREE_AFTER_FILLING)
        with AcksAllLoad(cluster, [tp]) as load:
            wait_for(
                lambda: "event=log_dir_offline" in cluster.brokers[1].log_path.read_text(),
                FILL_WITHIN_S,
                message="broker 1 to take its full log dir offline",
            )
            offline_at = time.monotonic()
            wait_for(
                lambda: (s := cluster.state(tp)) is not None and s.leader in (2, 3),
                MOVE_WITHIN_S,
                message=lambda: f"leadership to move off broker 1: {cluster.state(tp)}",
            )
            moved_after = time.monotonic() - offline_at
            wait_for(
                lambda: load.report.acked_after(offline_at + moved_after),
                20,
                message="acks from the new leader",
            )
        report = load.report
        assert not report.fatal, report.fatal
        assert moved_after < MOVE_WITHIN_S
        state = cluster.state(tp)
        assert state is not None
        assert 1 not in state.isr
        log = cluster.brokers[1].log_path.read_text(errors="replace")
        assert "event=log_dir_offline" in log
        assert "No space left on device" in log
        check_acked_records_survive(cluster, report)
        # The notification was processed and deleted by the controller.
        wait_for(
            lambda: not zk_client.get_children(znodes.LOG_DIR_EVENT_NOTIFICATION_PATH),
            20,
            message="the controller to delete the log dir event notification",
        )
        # Free the space and restart: the dir comes back and the broker rejoins the ISR.
        filler.unlink()
        cluster.brokers[1].kill()
        cluster.brokers[1].start(zk_client)
        cluster.wait_for_isr(tp, {1, 2, 3}, timeout=30)
        check_acked_records_survive(cluster, report)
