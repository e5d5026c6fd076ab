"""The failure scenarios of docs/replication.md as product code (``minibroker chaos scenario``).

Each scenario (:mod:`~chaos.scenario.hw_data_loss`, :mod:`~chaos.scenario.hw_divergence`)
drives its own ZooKeeper and brokers A and B (:mod:`~chaos.scenario.cluster`) step by step
as the design notes tell it (:mod:`~chaos.scenario.play`); :mod:`~chaos.scenario.runner`
records the run into a run directory, audits it and sets the audit's findings against the
notes' prediction (:mod:`~chaos.scenario.verdict`).
"""
