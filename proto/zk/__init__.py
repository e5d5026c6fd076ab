"""ZooKeeper as every process sees it: the paths and JSON of Kafka's layout (``znodes``),
the rules for reading them (``znode_reads``), the one session layer on asyncio
(``session``) and its typed reads and writes (``kafka_zk_client``), the same reads for the
synchronous tools (``sync_client``), and digest credentials (docs/zookeeper.md)."""
