"""Real processes, and nothing that imitates them: Debian's ZooKeeper (one server or an
ensemble), broker processes, the local cluster of ``minibroker cluster up``, and the Docker
files. The tests, chaos and the benchmarks all start clusters through it."""
