"""The gRPC contract between processes: ``minibroker.proto``, its committed stubs and the
generator that keeps them current (``make proto``)."""
