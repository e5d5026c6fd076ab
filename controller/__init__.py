"""The controller (Kafka's ``kafka.controller``), run inside every broker process and active
in the one elected through ``/controller``: its event loop, its ZooKeeper reads and fenced
writes, the pure decisions, and the requests it sends to the brokers (docs/replication.md).
It imports only the contracts (``proto``)."""
