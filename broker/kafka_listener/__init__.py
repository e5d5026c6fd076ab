"""The Kafka protocol front door (the ``KAFKA://`` endpoint, ``kafka.port``), for Kafka's
own clients and tools: the connections
(:mod:`~broker.kafka_listener.server`), the framing and kio's messages, the handlers per
API family (:mod:`~broker.kafka_listener.apis`, ``group_apis``, ``admin_apis``,
``config_apis``), and the
topic administration only this door serves (:mod:`~broker.kafka_listener.topic_admin`,
Kafka's ``ZkAdminManager``). It translates; what a request means is in
:mod:`broker.request_handlers` and below.
"""
