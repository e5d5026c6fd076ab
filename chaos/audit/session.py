"""The SparkSession the audit runs on: local by default, a standalone cluster on request.

Facts of these machines: Spark binds to another interface unless told
127.0.0.1, its UI and console progress bar are noise for a command-line tool, and a local
session takes 8-21 s to start on two busy cores, so callers that audit several times (the
tests, the benchmark) start one session and pass it to :func:`chaos.audit.job.audit`.

On a standalone cluster (``--master spark://host:7077``) the executors open the segment and
history files themselves: the data dirs must be mounted at the same paths on every worker,
and the workers' Python must have minibroker installed (the project's image has it).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path

from pyspark.sql import SparkSession

__all__ = ["DEFAULT_MASTER", "JIT_OPTIONS", "local_cores", "start_session"]

DEFAULT_MASTER = "local[*]"
LOG4J_CONFIG = Path(__file__).with_name("log4j2.properties")
"""The driver's logging: errors only, on stderr."""
JIT_OPTIONS = "-XX:TieredStopAtLevel=1"
"""The JVMs compile with C1 only. The audit's JVM work is moving blocks of bytes between
Python tasks; C2's optimising compiler threads spent 0.6-1 s of CPU per audit of the
benchmark's 3M records compiling code that never paid it back (the JVM's CPU per run:
1.0-1.5 s with C2, 0.4 s without, the same task time)."""
_LOCAL = re.compile(r"local(?:\[(\*|\d+)(?:,\s*\d+)?\])?")


def local_cores(master: str) -> int | None:
    """Worker threads of a ``local[N]`` master (``local[*]``: the machine's cores); None for
    a cluster master."""
    match = _LOCAL.fullmatch(master.strip())
    if match is None:
        return None
    threads = match.group(1)
    if threads is None:
        return 1
    if threads == "*":
        return os.cpu_count() or 1
    return int(threads)


def start_session(
    master: str = DEFAULT_MASTER, conf: Mapping[str, str] | None = None
) -> SparkSession:
    """A SparkSession for the audit; ``conf`` overrides the defaults below.

    The executors' Python is this interpreter (``PYSPARK_PYTHON``), so they import the same
    minibroker (the project's codec) as the driver.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    settings = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.extraJavaOptions": (
            f"-Dlog4j2.configurationFile={LOG4J_CONFIG.as_uri()} {JIT_OPTIONS}"
        ),
        "spark.executor.extraJavaOptions": JIT_OPTIONS,
    }
    if local_cores(master) is not None:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        settings.update(
            {
                "spark.driver.host": "127.0.0.1",
                "spark.driver.bindAddress": "127.0.0.1",
                # The driver is the executor in local mode: room for the shuffled blocks.
                "spark.driver.memory": "2g",
            }
        )
    settings.update(conf or {})
    builder = SparkSession.builder.master(master).appName("minibroker-audit")
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
