"""The client library (producer, consumer, ZooKeeper consumer groups, admin client, cluster
metadata; docs/client.md), which imports only the contracts, and the ``minibroker`` command
line in ``client/cli/`` (docs/cli.md), the top of the stack."""
