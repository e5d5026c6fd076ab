"""Settings under Kafka's property names: a broker's (``broker_config``), which of them
change at run time (``dynamic_broker_config``), and a topic's log (``log_config``)."""
