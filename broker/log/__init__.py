"""The storage engine (Kafka's ``kafka.log``): a partition's log on disk and the files
around it. It knows nothing of replication, the controller or the network (checked by
``lint-imports``).

- :mod:`~broker.log.log`: ``Log``, the append-only log of one partition (Kafka's
  ``UnifiedLog``): appends as leader and follower, reads, truncation, retention, flushes;
- :mod:`~broker.log.log_loader`: opening a log directory and recovering it after a crash
  (Kafka's ``LogLoader``);
- :mod:`~broker.log.log_segment` and :mod:`~broker.log.offset_index`: one segment file and
  its sparse index;
- :mod:`~broker.log.log_validator`: what a leader checks before it stores a producer's
  batch (Kafka's ``LogValidator``);
- :mod:`~broker.log.leader_epoch_cache` and :mod:`~broker.log.epoch_entry`: the
  leader-epoch cache and its ``leader-epoch-checkpoint`` file (KIP-101, KIP-279);
- :mod:`~broker.log.producer_state`: idempotent producers' sequences, rebuilt from the log;
- :mod:`~broker.log.checkpoints`: the offset checkpoint files and ``meta.properties``;
- :mod:`~broker.log.log_manager`: every log of a data directory, and its checkpoints.

The configuration a log is opened with, ``LogConfig``, is a shared contract:
:mod:`proto.config.log_config`.
"""
