"""Options and helpers shared by the client commands (``topics``, ``produce``, ``consume``,
``perf``): where the cluster is, the topic, ``--property``, and running a coroutine as a
command.

Where the cluster is, first found first: ``--bootstrap-server``, ``$MINIBROKER_BOOTSTRAP``,
every broker of the local cluster whose ``cluster.json`` is in ``--data-dir`` (else
``$MINIBROKER_DATA_DIR``, else ``./minibroker-data``; see :mod:`deploy.local_cluster`),
``localhost:9091``; ZooKeeper likewise (``--zookeeper``, ``$MINIBROKER_ZOOKEEPER``, the
local cluster's, ``localhost:2181``). So after ``minibroker cluster kill 1`` the defaults
still reach brokers 2 and 3. The options default to None and :func:`finish_args` fills them
in once the command line is parsed, for the command that runs only: ``--help`` and the
other commands read no file.

Errors in the command line that parsing cannot see raise :class:`UsageError`; the CLI
prints them with the command's usage, as argparse does its own.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from collections.abc import Callable, Collection, Coroutine
from pathlib import Path
from typing import Any

from client.admin import AdminClient
from client.metadata import (
    BOOTSTRAP_ENV,
    DEFAULT_BOOTSTRAP,
    BrokerConnections,
    ClientError,
    MetadataClient,
)
from client.producer import ProducerConfig, parse_acks
from proto.errors import UsageError
from proto.transport.tls import TlsConfig
from proto.zk.credentials import ZkCredentials, read_digest_file

ZOOKEEPER_ENV = "MINIBROKER_ZOOKEEPER"
COMMAND_CONFIG_ENV = "MINIBROKER_COMMAND_CONFIG"
DEFAULT_ZOOKEEPER = "localhost:2181"


def default_zookeeper() -> str:
    """``$MINIBROKER_ZOOKEEPER``, else ``localhost:2181`` (without a local cluster)."""
    return os.environ.get(ZOOKEEPER_ENV) or DEFAULT_ZOOKEEPER


# -- where the cluster is -----------------------------------------------------------------------


def _add_data_dir_option(parser: argparse.ArgumentParser) -> None:
    if "--data-dir" in parser._option_string_actions:
        return
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        metavar="DIR",
        # deploy.local_cluster's DATA_DIR_ENV and DEFAULT_DATA_DIR, written out so that
        # building the parser (``--help``) does not import deploy; a test checks they agree.
        help="a local cluster's directory, whose cluster.json gives the default addresses "
        "(default: $MINIBROKER_DATA_DIR or ./minibroker-data)",
    )


def add_bootstrap_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bootstrap-server",
        default=None,
        metavar="HOST:PORT",
        help=f"broker(s) to start from (default: ${BOOTSTRAP_ENV}, else every broker of the "
        f"local cluster in --data-dir, else {DEFAULT_BOOTSTRAP})",
    )
    parser.set_defaults(default_bootstrap=True)
    _add_data_dir_option(parser)
    _add_tls_options(parser)


def _add_tls_options(parser: argparse.ArgumentParser) -> None:
    tls = parser.add_argument_group("TLS (a cluster started with `cluster up --tls`)")
    tls.add_argument(
        "--command-config",
        type=Path,
        default=None,
        metavar="FILE",
        help="Kafka client properties: security.protocol=SSL, ssl.truststore.location, "
        f"ssl.keystore.location (default: ${COMMAND_CONFIG_ENV})",
    )
    tls.add_argument("--tls-ca", type=Path, default=None, metavar="PEM", help="CA certificates")
    tls.add_argument(
        "--tls-cert",
        type=Path,
        default=None,
        metavar="PEM",
        help="this client's certificate (with its key, unless --tls-key)",
    )
    tls.add_argument("--tls-key", type=Path, default=None, metavar="PEM", help="its private key")


def tls_config(args: argparse.Namespace) -> TlsConfig | None:
    """The TLS settings of the command line: ``--tls-ca`` (with ``--tls-cert`` and
    ``--tls-key``), else ``--command-config`` or ``$MINIBROKER_COMMAND_CONFIG``; None:
    plaintext. Raises UsageError for a certificate without a CA, TlsConfigError for files
    that are not what they must be."""
    ca = getattr(args, "tls_ca", None)
    cert = getattr(args, "tls_cert", None)
    key = getattr(args, "tls_key", None)
    if ca is not None:
        return TlsConfig.from_files(ca, cert, key)
    if cert is not None or key is not None:
        raise UsageError("--tls-cert and --tls-key need --tls-ca (the CA to check brokers with)")
    config = _command_config(args)
    if config is None:
        return None
    return TlsConfig.from_properties(read_properties(config))


def _command_config(args: argparse.Namespace) -> Path | None:
    """``--command-config``, else ``$MINIBROKER_COMMAND_CONFIG``, else the admin properties
    of the local ``cluster up --tls`` cluster in ``--data-dir``."""
    given = getattr(args, "command_config", None) or os.environ.get(COMMAND_CONFIG_ENV)
    if given:
        return Path(given)
    from deploy.local_cluster import LocalCluster, default_data_dir  # only when run

    return LocalCluster(getattr(args, "data_dir", None) or default_data_dir()).command_config()


def admin_client(args: argparse.Namespace, conns: BrokerConnections) -> AdminClient:
    """The admin client of ``--zookeeper``, with the ZooKeeper digest of the command
    config (``zookeeper.auth.digest.file``) when the cluster's znodes are ACL'd."""
    return AdminClient(conns, args.zookeeper, zookeeper_credentials=zookeeper_credentials(args))


def zookeeper_credentials(args: argparse.Namespace) -> ZkCredentials | None:
    """``zookeeper.auth.digest.file`` of ``--command-config`` (or
    ``$MINIBROKER_COMMAND_CONFIG``), with ``zookeeper.set.acl``; None without one."""
    config = _command_config(args)
    if config is None:
        return None
    properties = read_properties(config)
    digest_file = properties.get("zookeeper.auth.digest.file")
    if not digest_file:
        return None
    set_acl = properties.get("zookeeper.set.acl", "true").strip().lower() == "true"
    return read_digest_file(digest_file, set_acl=set_acl)


def read_properties(path: Path) -> dict[str, str]:
    """A Java properties file's ``key=value`` lines (``#`` and ``!`` comments, blank lines
    skipped; ``key: value`` too). Raises ClientError if it cannot be read."""
    try:
        text = path.read_text()
    except OSError as err:
        raise ClientError(f"cannot read {path}: {err.strerror or err}") from err
    properties: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        key, sep, value = line.partition("=")
        if not sep:
            key, sep, value = line.partition(":")
        if not sep:
            raise ClientError(f"{path}: expected key=value, got {line!r}")
        properties[key.strip()] = value.strip()
    return properties


def add_zookeeper_option(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--zookeeper",
        default=None,
        metavar="HOST:PORT",
        help=f"ZooKeeper, for {what} (default: ${ZOOKEEPER_ENV}, else the local cluster's "
        f"in --data-dir, else {DEFAULT_ZOOKEEPER})",
    )
    parser.set_defaults(default_zookeeper=True)
    _add_data_dir_option(parser)


class _LocalAddresses:
    """The local cluster's addresses, cluster.json read at most once and only if needed."""

    def __init__(self, data_dir: Path | None) -> None:
        self.data_dir = data_dir
        self._found: tuple[str, str] | None = None
        self._read = False

    def get(self) -> tuple[str, str] | None:
        if not self._read:
            from deploy.local_cluster import LocalCluster, default_data_dir  # only when run

            self._found = LocalCluster(self.data_dir or default_data_dir()).addresses()
            self._read = True
        return self._found


def finish_args(args: argparse.Namespace) -> None:
    """Fill in what parsing leaves open: ``args.topic`` from TOPIC or ``--topic``, and the
    default ``--bootstrap-server`` and ``--zookeeper`` (see the module docstring). Raises
    UsageError for a missing or doubly given topic, LocalClusterError for a damaged
    cluster.json."""
    if hasattr(args, "topic_option"):
        args.topic = _one_topic(args)
    local = _LocalAddresses(getattr(args, "data_dir", None))
    # Only the options registered here get these defaults; a command with options of its
    # own (`cluster status`) needs to know what was given.
    if getattr(args, "default_bootstrap", False) and args.bootstrap_server is None:
        found = local.get()
        args.bootstrap_server = os.environ.get(BOOTSTRAP_ENV) or (
            found[0] if found else DEFAULT_BOOTSTRAP
        )
    if getattr(args, "default_zookeeper", False) and args.zookeeper is None:
        env = os.environ.get(ZOOKEEPER_ENV)
        found = None if env else local.get()
        args.zookeeper = env or (found[1] if found else DEFAULT_ZOOKEEPER)


def connections(args: argparse.Namespace) -> BrokerConnections:
    """The broker connections for ``--bootstrap-server`` (ClientError if malformed)."""
    if args.bootstrap_server is None:
        finish_args(args)
    return BrokerConnections.from_bootstrap(args.bootstrap_server, tls=tls_config(args))


async def check_reachable(conns: BrokerConnections, topics: Collection[str] = ()) -> None:
    """Ask the bootstrap servers for metadata once: BrokerUnreachableError ("cannot reach
    any broker ... is the cluster running?") at once when none answers. The producer would
    retry for ``max_block_ms`` first, as Kafka's does; a command line says so now."""
    await MetadataClient(conns).refresh(topics)


# -- the topic ------------------------------------------------------------------------------------


def add_topic_argument(
    parser: argparse.ArgumentParser, *, required: bool = True, help: str = "the topic"
) -> None:
    """TOPIC as a positional argument or as ``--topic TOPIC`` (Kafka's tools spell it so);
    :func:`finish_args` puts it in ``args.topic`` (None when optional and not given), and
    refuses both spellings with different topics."""
    parser.add_argument("topic", nargs="?", metavar="TOPIC", help=help)
    parser.add_argument(
        "--topic", dest="topic_option", metavar="TOPIC", help="the same as TOPIC (Kafka's way)"
    )
    parser.set_defaults(topic_required=required)


def _one_topic(args: argparse.Namespace) -> str | None:
    positional, option = args.topic, args.topic_option
    if positional is not None and option is not None and positional != option:
        raise UsageError(f"two topics given: {positional!r} and --topic {option!r}")
    topic: str | None = positional if positional is not None else option
    if topic is None and getattr(args, "topic_required", True):
        raise UsageError("the following arguments are required: TOPIC (or --topic TOPIC)")
    return topic


# -- --property -----------------------------------------------------------------------------------


def property_argument(known: Collection[str]) -> Callable[[str], tuple[str, str]]:
    """The ``type`` of ``--property KEY=VALUE`` (Kafka's console tools' properties):
    argparse reports a malformed pair or an unknown key, naming the known ones."""

    def parse(text: str) -> tuple[str, str]:
        key, sep, value = text.partition("=")
        key = key.strip()
        if not sep or not key:
            raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
        if key not in known:
            raise argparse.ArgumentTypeError(
                f"unknown property {key!r} (known: {', '.join(sorted(known))})"
            )
        return key, value

    return parse


def boolean_property(properties: dict[str, str], key: str) -> bool | None:
    """A ``true``/``false`` property (None when not given); UsageError otherwise."""
    value = properties.get(key)
    if value is None:
        return None
    if value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise UsageError(f"property {key} must be true or false, got {value!r}")


# -- the rest -------------------------------------------------------------------------------------


def acks_argument(text: str) -> int:
    """``--acks``: ``all`` or ``-1``, ``0``, ``1`` (argparse reports a bad value)."""
    try:
        return parse_acks(text)
    except ClientError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def compression_type_argument(text: str) -> str:
    """``--compression-type``: the producer's ``compression.type`` (none, gzip, snappy, lz4,
    zstd), lower-cased; argparse reports another value, naming the valid ones."""
    try:
        return ProducerConfig(compression_type=text).compression_type
    except ClientError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_compression_type_option(parser: argparse.ArgumentParser) -> None:
    """``--compression-type CODEC``, the producer's ``compression.type`` (default none)."""
    parser.add_argument(
        "--compression-type",
        type=compression_type_argument,
        default="none",
        metavar="CODEC",
        help="the producer's compression.type: none (default), gzip, snappy, lz4 or zstd; "
        "each batch is compressed once when it is sent",
    )


def run_async(coroutine: Coroutine[Any, Any, int]) -> int:
    """Run a command's coroutine on uvloop; a ClientError propagates to the CLI's one-line
    error handler."""
    try:
        import uvloop

        return uvloop.run(coroutine)
    except ImportError:  # pragma: no cover - uvloop is a dependency
        return asyncio.run(coroutine)


__all__ = [
    "ClientError",
    "UsageError",
    "acks_argument",
    "add_bootstrap_option",
    "add_compression_type_option",
    "add_topic_argument",
    "add_zookeeper_option",
    "boolean_property",
    "check_reachable",
    "compression_type_argument",
    "connections",
    "default_zookeeper",
    "finish_args",
    "property_argument",
    "run_async",
]
