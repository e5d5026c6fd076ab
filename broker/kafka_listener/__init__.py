"""The Kafka protocol front door (the ``KAFKA://`` endpoint, ``kafka.port``), for Kafka's
own clients and tools: the connections
(:mod:`~broker.kafka_listener.server`), the framing and kio's messages, the handlers per
API family (:mod:`~broker.kafka_listener.apis`, ``group_apis``, ``admin_apis``,
``config_apis``, ...). It translates; what a request means is in
:mod:`broker.request_handlers`, :mod:`broker.topic_admin` (Kafka's ``ZkAdminManager``,
which auto topic creation shares with CreateTopics) and below.
"""
