"""What every minibroker process does the same way, whatever its role: one structured log
line per event, and the interpreter's malloc and GC settings."""
