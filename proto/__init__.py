"""The contracts two processes share, and nothing of either side: the gRPC contract
(``wire/``), the transport (``transport/``), the record batch (``records/``), ZooKeeper's
layout and session (``zk/``), configs (``config/``), process settings (``process/``), and the
errors, ``TopicPartition`` and replica placement every layer uses (docs/design.md)."""
