"""The broker process (Kafka's ``kafka.server`` with ``kafka.log`` and ``kafka.coordinator``):
storage (``log/``), replication (``replication/``), the coordinators (``coordinator/``), two
independent front doors (``grpc_listener/``, ``kafka_listener/``) over what a request means
(``request_handlers``), and the process that wires them (``kafka_server``, ``main``). The
layers and what each may import: docs/design.md."""
