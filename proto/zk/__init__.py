"""ZooKeeper as every process sees it: the paths and JSON of Kafka's layout (``znodes``),
the one session layer on asyncio (``session``), digest credentials, and the typed reads
and writes the broker, controller, tools and tests share (docs/zookeeper.md)."""
