"""Regenerate the committed Python stubs from ``proto/wire/minibroker.proto``.

Run as ``python -m proto.wire.generate`` (``make proto``). The stubs are committed so that a user
needs no protoc; ``tests/unit/test_proto_stubs.py`` regenerates them into a temp dir and
fails when the committed ones are stale.
"""

from __future__ import annotations

import sys
from pathlib import Path

WIRE_DIR = Path(__file__).resolve().parent
REPO_ROOT = WIRE_DIR.parent.parent
PROTO_FILE = "proto/wire/minibroker.proto"
GENERATED_FILES = (
    "minibroker_pb2.py",
    "minibroker_pb2.pyi",
    "minibroker_pb2_grpc.py",
    "minibroker_pb2_grpc.pyi",
)


def generate(out_dir: Path) -> None:
    """Write the four generated files for PROTO_FILE under ``out_dir/proto/wire/``.

    The include root is the repository root, so the generated gRPC module imports
    ``from proto.wire import minibroker_pb2`` and works as part of the ``proto.wire`` package.
    """
    from grpc_tools import protoc  # dev dependency: only needed to regenerate

    (out_dir / "proto" / "wire").mkdir(parents=True, exist_ok=True)
    # mypy-protobuf's plugins sit beside the interpreter (the venv's bin), which need not be
    # on PATH when make or pytest runs us.
    bin_dir = Path(sys.executable).parent
    args = [
        "grpc_tools.protoc",
        f"-I{REPO_ROOT}",
        f"--plugin=protoc-gen-mypy={bin_dir / 'protoc-gen-mypy'}",
        f"--plugin=protoc-gen-mypy_grpc={bin_dir / 'protoc-gen-mypy_grpc'}",
        f"--python_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        f"--mypy_out={out_dir}",
        f"--mypy_grpc_out={out_dir}",
        str(REPO_ROOT / PROTO_FILE),
    ]
    status = protoc.main(args)
    if status != 0:
        raise RuntimeError(f"protoc failed with status {status}: {' '.join(args)}")


def main() -> int:
    generate(REPO_ROOT)
    for name in GENERATED_FILES:
        print(f"wrote proto/wire/{name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
