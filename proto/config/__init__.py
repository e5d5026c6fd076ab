"""Settings under Kafka's property names: a broker's (``broker_config``), which of them
change at run time (``dynamic_broker_config``), a topic's log (``log_config``), every topic
config of Kafka with its type and checks (``config_def``, ``topic_config_def``), and what
DescribeConfigs answers for them (``describe_configs``)."""
