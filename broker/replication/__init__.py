"""Replication (Kafka's ``ReplicaManager``, ``Partition`` and ``ReplicaFetcherThread``):
the partitions this broker leads or follows, the high watermark and the ISR, the follower's
fetch loop and its truncation by leader epoch (KIP-101, KIP-279), and the purgatories that
hold a produce until its acks and a fetch until its bytes (docs/replication.md).

- :mod:`~broker.replication.replica_manager`: every partition of the broker; appends,
  reads, LeaderAndIsr and StopReplica;
- :mod:`~broker.replication.partition`: one partition's leader or follower state;
- :mod:`~broker.replication.replica_fetcher`: the follower's fetch loop, one per leader;
- :mod:`~broker.replication.truncation`: where a follower truncates before it fetches;
- :mod:`~broker.replication.control_request_checks`: whether a control request's epochs
  may be believed, against what ZooKeeper holds;
- :mod:`~broker.replication.purgatory`, :mod:`~broker.replication.delayed_produce`,
  :mod:`~broker.replication.delayed_fetch`: requests waiting for a condition.

It stands on the storage engine (:mod:`broker.log`) and knows neither front door.
"""
