"""Kafka's v2 record batch: the codec, the incremental builder a producer appends to, and
the fixed-layout fast path. The bytes a producer sends are the bytes the log stores and a
consumer reads (docs/storage.md)."""
