"""docs/design.md stays true to the code: every path and module it names exists, its layer
diagrams are the import-linter contracts of pyproject.toml, and its lists of the wire
protocols' calls are the ones the brokers serve.

The layer blocks are read as the page tells its reader to read them: a fenced block after
``<!-- layers contract: NAME -->`` (NAME: ``stack`` for the contract without containers,
else the contract's container), in which a line that starts with two spaces and a module
name is a layer (``a | b``: independent siblings, ``a : b``: siblings that may import each
other) and every other line is commentary.
"""

from __future__ import annotations

import ast
import re
import tomllib
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DESIGN = REPO / "docs" / "design.md"
ROOT_PACKAGES = ("proto", "broker", "controller", "client", "deploy", "chaos", "bench", "tests")

Layer = str
"""A layer, canonical: its modules sorted, joined by their delimiter (``a | b``, ``a : b``)."""


def _text() -> str:
    return DESIGN.read_text()


def _prose(text: str) -> str:
    """The page without its fenced blocks (diagrams hold commentary, not code spans)."""
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def _code_spans(text: str) -> list[str]:
    return re.findall(r"`([^`\n]+)`", _prose(text))


def _section(text: str, heading: str) -> str:
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else len(text)]


def test_every_path_in_backticks_exists() -> None:
    """A code span with a slash (``broker/log/log.py``, ``proto/zk/``) is a path of the
    repository; znodes (``/controller``) and placeholders (``<topic>``) are not paths."""
    paths = [
        span
        for span in _code_spans(_text())
        if "/" in span and not span.startswith("/") and re.fullmatch(r"[\w.\-/]+", span)
    ]
    assert len(paths) > 50, "the page names the modules it describes"
    missing = sorted({p for p in paths if not (REPO / p).exists()})
    assert not missing, f"docs/design.md names paths that do not exist: {missing}"


@cache
def _defined_names(path: Path) -> frozenset[str]:
    """A module's top-level functions, classes and assignments, and ``Class.member``."""
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.ClassDef):
            names.add(node.name)
            for member in node.body:
                if isinstance(member, ast.FunctionDef | ast.AsyncFunctionDef):
                    names.add(f"{node.name}.{member.name}")
                elif isinstance(member, ast.AnnAssign) and isinstance(member.target, ast.Name):
                    names.add(f"{node.name}.{member.target.id}")
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return frozenset(names)


def _module_file(dotted: str) -> Path | None:
    base = REPO.joinpath(*dotted.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def test_every_dotted_module_name_resolves() -> None:
    """``client.cli.main.COMMANDS``: a module of the repository, then names defined in it."""
    pattern = re.compile(rf"(?:{'|'.join(ROOT_PACKAGES)})(?:\.\w+)+")
    unresolved = []
    for span in {s for s in _code_spans(_text()) if pattern.fullmatch(s)}:
        parts = span.split(".")
        for cut in range(len(parts), 0, -1):
            module = _module_file(".".join(parts[:cut]))
            if module is not None:
                rest = ".".join(parts[cut:])
                if rest and rest not in _defined_names(module):
                    unresolved.append(span)
                break
        else:
            unresolved.append(span)
    assert not unresolved, unresolved


def test_where_to_look_names_what_its_modules_define() -> None:
    """Each row's class or function is defined in one of the modules of that row."""
    rows = [
        line
        for line in _section(_text(), "Where to look").splitlines()
        if line.startswith("| ") and not line.startswith("| concern ")
    ]
    assert len(rows) > 30
    wrong = []
    for row in rows:
        cells = [cell.strip() for cell in row.strip()[1:-1].split("|")]
        assert len(cells) == 4, row
        modules = [REPO / m for m in re.findall(r"`([^`]+\.py)`", cells[1])]
        for name in re.findall(r"`([^`]+)`", cells[2]):
            if not any(m.is_file() and name in _defined_names(m) for m in modules):
                wrong.append(f"{name} is not defined in {cells[1]}")
    assert not wrong, "\n".join(wrong)


def _layer(text: str) -> Layer:
    for delimiter in ("|", ":"):
        if delimiter in text:
            return f" {delimiter} ".join(sorted(part.strip() for part in text.split(delimiter)))
    return text.strip()


def _doc_layers() -> dict[str, list[Layer]]:
    blocks = re.findall(
        r"^<!-- layers contract: (\w+) -->\n```text\n(.*?)^```", _text(), flags=re.S | re.M
    )
    layer_line = re.compile(r"  ([a-z_]+(?: [|:] [a-z_]+)*)(?: {2,}\S.*)?")
    found: dict[str, list[Layer]] = {}
    for name, block in blocks:
        assert name not in found, f"two blocks for the {name} contract"
        found[name] = [
            _layer(match.group(1))
            for match in map(layer_line.fullmatch, block.splitlines())
            if match
        ]
    return found


def _contract_layers() -> dict[str, list[Layer]]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    found: dict[str, list[Layer]] = {}
    for contract in config["contracts"]:
        if contract["type"] != "layers":
            continue
        containers = contract.get("containers", [])
        assert len(containers) <= 1, "one block per container: split the contract"
        name = containers[0] if containers else "stack"
        found[name] = [_layer(layer) for layer in contract["layers"]]
    return found


def test_the_layer_diagrams_are_the_import_linter_contracts() -> None:
    doc, contracts = _doc_layers(), _contract_layers()
    assert set(doc) == set(contracts), (
        "docs/design.md needs one layers block per layers contract of pyproject.toml"
    )
    for name, layers in contracts.items():
        assert doc[name] == layers, (
            f"docs/design.md's {name} layers differ from pyproject.toml's contract:\n"
            f"doc:      {doc[name]}\ncontract: {layers}"
        )


def test_the_layer_parser_reads_siblings_and_skips_commentary() -> None:
    assert _layer("kafka_listener  |grpc_listener") == "grpc_listener | kafka_listener"
    assert _layer("c : a : b") == "a : b : c"
    assert _doc_layers()["stack"][0] == "bench", (
        "the command line's line (client/cli/) is commentary, not a layer"
    )


@pytest.mark.parametrize("kind", ["service", "rpc"])
def test_every_grpc_service_and_call_is_named(kind: str) -> None:
    proto = (REPO / "proto" / "wire" / "minibroker.proto").read_text()
    names = re.findall(rf"^\s*{kind} (\w+)", proto, flags=re.M)
    assert names
    spans = set(_code_spans(_text()))
    assert [n for n in names if n not in spans] == []


def kafka_api_table(text: str) -> dict[int, tuple[int, int]]:
    """The ``| API | key | low-high |`` rows of a page's table of the Kafka listener's APIs,
    by API key; each row's name is checked to be that key's."""
    from kio.schema.index import api_key_map

    rows = re.findall(r"^\| (\w+) \| (\d+) \| (\d+)-(\d+) \|$", text, flags=re.M)
    for name, key, _, _ in rows:
        snake = re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()
        assert api_key_map[int(key)] == snake, f"API key {key} is not {name}"
    return {int(key): (int(low), int(high)) for _, key, low, high in rows}


def _readme_kafka_section() -> str:
    text = (REPO / "README.md").read_text()
    start = text.index("\n## Use your Kafka tools\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else len(text)]


@pytest.mark.parametrize("page", ["docs/design.md", "README.md"])
def test_the_kafka_listener_table_is_what_api_versions_lists(page: str) -> None:
    from broker.kafka_listener.apis import SUPPORTED_VERSIONS

    text = _text() if page == "docs/design.md" else _readme_kafka_section()
    assert kafka_api_table(text) == SUPPORTED_VERSIONS


LONG_MODULE_LINES = 700
LONG_MODULES_INTRO = "The modules over 700 lines, and why each stays whole"


def test_the_long_modules_list_is_complete() -> None:
    """Every module of the project over 700 lines is named, with its reason, in the one
    paragraph that says why it stays whole; none that is shorter."""
    text = _text()
    start = text.index(LONG_MODULES_INTRO)
    paragraph = text[start : text.index("\n\n", start)]
    named = {s for s in re.findall(r"`([^`\n]+\.py)`", paragraph) if not s.startswith("tests/")}
    long = set()
    for package in ROOT_PACKAGES:
        if package == "tests":
            continue
        for path in (REPO / package).rglob("*.py"):
            if "_pb2" in path.name:
                continue
            if len(path.read_text().splitlines()) > LONG_MODULE_LINES:
                long.add(str(path.relative_to(REPO)))
    assert named == long, f"missing: {sorted(long - named)}; not long: {sorted(named - long)}"
