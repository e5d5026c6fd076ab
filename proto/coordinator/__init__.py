"""The records Kafka's coordinators keep in their internal topics, and where a key lives."""
