"""The Spark consistency audit of replica logs and an acknowledgement history (docs/audit.md).

- :mod:`~chaos.audit.cli`: ``minibroker audit`` (no Spark or numpy imported until it runs)
- :mod:`~chaos.audit.data_dirs`: the data dirs' layout and small files, read on the driver
- :mod:`~chaos.audit.job`: the Spark job (one shuffle) and the driver's assembly
- :mod:`~chaos.audit.tasks`: the job's map tasks (read the inputs) and reduce tasks (one per
  partition)
- :mod:`~chaos.audit.segments`: a segment file's batch headers and CRCs, as columns
- :mod:`~chaos.audit.log_checks`: a replica's batches judged (gap, crc, epoch_cache,
  hw_above_leo) and summarised
- :mod:`~chaos.audit.chunk`: a partition's records across its replicas, judged against the
  history (lost_ack, divergence, duplicate, phantom, the read kinds)
- :mod:`~chaos.audit.duplicates`: the duplicate rule (one write or value at several offsets)
- :mod:`~chaos.audit.compaction`: a compacted partition's records, replica by replica
  (compaction_lost_latest, compaction_moved, tombstone_dropped_early)
- :mod:`~chaos.audit.topic_configs`: which topics are compacted (a run's ``topics.json``)
- :mod:`~chaos.audit.record_columns`: batches decoded into columns, runs of one layout at a
  time
- :mod:`~chaos.audit.history`: one history or timeline line, the definition of a valid one
- :mod:`~chaos.audit.history_columns`, :mod:`~chaos.audit.history_templates`: a range of
  history lines as columns, most of them parsed by template
- :mod:`~chaos.audit.hashing`: 64-bit hashes of values, writes and versions (numpy)
- :mod:`~chaos.audit.polls`: a consumer's reads, step by step
- :mod:`~chaos.audit.runs`: violation items merged into runs
- :mod:`~chaos.audit.violations`: a finding's sentence
- :mod:`~chaos.audit.model`, :mod:`~chaos.audit.report`: the result and its outputs
- :mod:`~chaos.audit.session`: the SparkSession
- :mod:`~chaos.audit.testing`: data dirs and histories for tests and benchmarks
"""
