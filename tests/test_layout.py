"""Test-suite hygiene: shared fakes come from tests/fakes.py, never from conftest or a test."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def test_no_test_imports_conftest_or_another_test_module():
    offenders = {
        f"{path.relative_to(TESTS)}: {module}"
        for path in TESTS.rglob("*.py")
        for module in imported_modules(path)
        if module.startswith("tests.")
        and (module.endswith("conftest") or module.rsplit(".", 1)[-1].startswith("test_"))
    }
    assert offenders == set()


# --- the library's layers ----------------------------------------------------------------------

SRC = TESTS.parent / "src" / "agentic_retrieval"
PACKAGE = "agentic_retrieval"

CORE = ("state", "context", "graph", "nodes", "wiring", "llm.prompts")
"""The graph and what it is made of: state, settings, nodes, in graph/ the vocabulary, the
records, the events and the effort policy, and in wiring/ the builder and the node adapter."""
EDGES = (
    "wire",
    "server",
    "cli",
    "kb",
    "eval",
    "knowledge_base",
    "tool",
    "retriever",
    "studio",
    "checkpointing",
    "testing",
)
"""What serves the graph to callers: the retrieve API, REST, MCP, the command line, loaders."""


COMPONENTS = (
    "llm.chat_models",
    "llm.schemas",
    "sources",
    "rerankers",
    "text",
    "odata",
    "errors",
    "permissions",
    "embeddings",
    "local_model",
    "entitygraph",
)
"""What the graph and the edges are built from: models, sources, rerankers, text, filters, the
bundled embedding model."""
WORDS = ("context", "graph.vocabulary", "llm.prompts")
"""What a component may take from the core: the run settings, the words, the prompts."""


def library_modules() -> dict[str, Path]:
    modules = {}
    for path in SRC.rglob("*.py"):
        parts = path.relative_to(SRC.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        modules[name] = path
    return modules


MODULES = library_modules()


def imports_of(path: Path) -> set[str]:
    """Every module ``path`` imports, at the top or inside a function (``from a import b``
    counts as ``a.b`` when that is a module)."""
    names = set()
    for module in imported_modules(path):
        names.add(module)
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                if f"{node.module}.{alias.name}" in MODULES:
                    names.add(f"{node.module}.{alias.name}")
    return names


def in_layer(module: str, layer: tuple[str, ...]) -> bool:
    return any(
        module == f"{PACKAGE}.{part}" or module.startswith(f"{PACKAGE}.{part}.") for part in layer
    )


def violations(rule) -> list[str]:
    return sorted(
        f"{module} imports {imported}"
        for module, path in MODULES.items()
        for imported in imports_of(path)
        if rule(module, imported)
    )


def test_the_core_imports_nothing_from_the_edges():
    assert violations(lambda m, i: in_layer(m, CORE) and in_layer(i, EDGES)) == []


def test_components_import_no_edge_and_of_the_core_only_its_words():
    def wrong(module: str, imported: str) -> bool:
        if not in_layer(module, COMPONENTS):
            return False
        return in_layer(imported, EDGES) or (
            in_layer(imported, CORE) and not in_layer(imported, WORDS)
        )

    assert violations(wrong) == []


def test_only_the_builder_imports_nodes_and_never_their_private_helpers():
    def wrong(module: str, imported: str) -> bool:
        if in_layer(module, ("nodes",)) or not in_layer(imported, ("nodes",)):
            return False
        private = imported.rsplit(".", 1)[-1].startswith("_")
        return module != f"{PACKAGE}.wiring.builder" or private

    assert violations(wrong) == []


def test_only_the_entry_points_import_the_wiring():
    """wiring/ imports the nodes; nothing the nodes are made of imports it back, so graph/
    (the words and records) and wiring/ are two layers, not one knot."""

    def wrong(module: str, imported: str) -> bool:
        if not in_layer(imported, ("wiring",)) or in_layer(module, ("wiring",)):
            return False
        return not (module == PACKAGE or in_layer(module, EDGES))

    assert violations(wrong) == []


def test_no_node_imports_another_node_or_the_wiring():
    def wrong(module: str, imported: str) -> bool:
        if not in_layer(module, ("nodes",)) or module == f"{PACKAGE}.nodes":
            return False
        other_node = in_layer(imported, ("nodes",)) and not imported.rsplit(".", 1)[-1].startswith(
            "_"
        )
        wiring = in_layer(imported, ("wiring",))
        return (other_node and imported != f"{PACKAGE}.nodes") or wiring

    assert violations(wrong) == []


def test_no_private_module_of_a_dependency_is_imported():
    """A private module (``langgraph._internal``...) can move in any release: use public API."""

    def private(module: str, imported: str) -> bool:
        return not imported.startswith(PACKAGE) and any(
            part.startswith("_") and part != "__future__" for part in imported.split(".")
        )

    assert violations(private) == []


def test_the_command_line_registers_its_commands_in_one_place():
    """``cli/app.py`` imports every command module and registers it; nothing imports it back
    but the entry points, and no command module imports another (shared code has a module)."""
    entry_points = (f"{PACKAGE}.cli", f"{PACKAGE}.cli.__main__")

    def wrong(module: str, imported: str) -> bool:
        if imported == f"{PACKAGE}.cli.app":
            return module not in entry_points
        if in_layer(imported, ("cli.commands",)) and imported != f"{PACKAGE}.cli.commands":
            return module != f"{PACKAGE}.cli.app"
        return False

    assert violations(wrong) == []


ROOT = (
    "__init__",  # the public API
    "context",
    "errors",
    "state",
    "knowledge_base",  # the Python facade
    "retriever",
    "tool",
    "permissions",
    "embeddings",
    "checkpointing",
    "studio",
    "testing",
)
"""The package root: public entry points only, each a module README documents or the root
exports from (everything else lives in the package it belongs to)."""


MAX_MODULE_LINES = 700
"""A module longer than this is split by concern (a package of modules, as ``store/`` is)."""


def test_no_module_of_the_library_is_longer_than_700_lines():
    lengths = {
        name: len(path.read_text(encoding="utf-8").splitlines()) for name, path in MODULES.items()
    }
    assert {name: n for name, n in lengths.items() if n > MAX_MODULE_LINES} == {}


def test_the_package_root_keeps_the_public_entry_points_only():
    assert sorted(path.stem for path in SRC.glob("*.py")) == sorted(ROOT)
    assert len(ROOT) <= 12
