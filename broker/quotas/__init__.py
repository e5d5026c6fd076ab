"""Client quotas (Kafka's ``ClientQuotaManager``): the rates clients are measured by and
the throttle times of those over their quotas, below both listeners."""
