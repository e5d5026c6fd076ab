"""Faults on a schedule against a real cluster (nemeses on local processes or Docker), a
recorded workload, the failure scenarios, and the PySpark audit that judges the replica
logs afterwards (docs/chaos.md, docs/audit.md)."""
