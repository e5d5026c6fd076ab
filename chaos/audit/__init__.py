"""The Spark consistency audit of replica logs and an acknowledgement history (DESIGN.md §9).

- :mod:`~chaos.audit.cli`: ``minibroker audit`` (no Spark imported until it runs)
- :mod:`~chaos.audit.data_dirs`: the data dirs' layout and small files, read on the driver
- :mod:`~chaos.audit.history`: history and nemesis timeline lines
- :mod:`~chaos.audit.polls`: a consumer's reads one step at a time, walked in executors
- :mod:`~chaos.audit.segments`: segment files read in Spark's executors
- :mod:`~chaos.audit.job`: the Spark job: every check a DataFrame plan
- :mod:`~chaos.audit.violations`: a finding's sentence
- :mod:`~chaos.audit.model`, :mod:`~chaos.audit.report`: the result and its outputs
- :mod:`~chaos.audit.session`: the SparkSession
- :mod:`~chaos.audit.testing`: data dirs and histories for tests and benchmarks
"""
