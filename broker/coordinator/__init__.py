"""The coordinators a broker runs beside its partitions (Kafka's ``kafka.coordinator``):
consumer groups for Kafka's classic group protocol (:mod:`~broker.coordinator.group_coordinator`,
with Kafka's consumer protocol in :mod:`~broker.coordinator.consumer_protocol`) and
producer ids for idempotent producers (:mod:`~broker.coordinator.producer_id_manager`).
Both front doors use them.
"""
