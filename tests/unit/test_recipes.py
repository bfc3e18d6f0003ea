"""The two recipes of docs/ARCHITECTURE.md stay true: each is followed here on a copy of the
package, touching only the files the recipe names, and the result must work.

If one fails, the code grew another place a node or a source kind must be registered in:
remove that place (or, if it must stay, name it in the recipe and here).
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import agentic_retrieval

PACKAGE = Path(agentic_retrieval.__file__).parent


def copy_of_the_package(tmp_path: Path) -> Path:
    root = tmp_path / "src"
    shutil.copytree(
        PACKAGE, root / "agentic_retrieval", ignore=shutil.ignore_patterns("__pycache__")
    )
    return root / "agentic_retrieval"


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1, f"{path.name} no longer holds the recipe's anchor {old!r}"
    path.write_text(text.replace(old, new), encoding="utf-8")


def after_last(path: Path, prefix: str, line: str) -> None:
    """Insert ``line`` after the last line starting with ``prefix`` (the recipe's "after the
    others"), wherever that is in the file."""
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    last = max((i for i, text in enumerate(lines) if text.startswith(prefix)), default=None)
    assert last is not None, f"{path.name} has no line starting with {prefix!r}"
    lines.insert(last + 1, line)
    path.write_text("".join(lines), encoding="utf-8")


NODE_IMPORT = "from agentic_retrieval.nodes.count_words import count_words\n"


def run(package: Path, script: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        env={"PYTHONPATH": str(package.parent), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_adding_a_node_touches_its_module_the_builder_and_the_deciding_node(tmp_path: Path) -> None:
    package = copy_of_the_package(tmp_path)
    # 1. nodes/<name>.py: the node
    (package / "nodes" / "count_words.py").write_text(
        textwrap.dedent('''
        """count_words: how many words the question has (a recipe check)."""

        from langgraph.runtime import Runtime

        from agentic_retrieval.context import Context
        from agentic_retrieval.state import RetrievalState, Update


        async def count_words(state: RetrievalState, runtime: Runtime[Context]) -> Update:
            """Leave the state as it is; the test sees that the node ran."""
            return {}
        '''),
        encoding="utf-8",
    )
    # 2. wiring/builder.py: imported beside the other nodes, added after them, its fixed edge
    builder = package / "wiring" / "builder.py"
    after_last(builder, "from agentic_retrieval.nodes.", NODE_IMPORT)
    after_last(builder, "    add(", "    add(count_words)\n")
    after_last(
        builder,
        "    builder.add_edge(",
        '    builder.add_edge("count_words", "prepare_searches")\n',
    )
    # 3. behind a decision: a way out of the deciding node (its Literal) and the goto to it
    begin = package / "nodes" / "begin_turn.py"
    text = begin.read_text(encoding="utf-8")
    ways = re.findall(r"Command\[Literal\[([^\]]*)\]\]", text)
    assert len(ways) == 1, "begin_turn no longer returns one Command[Literal[...]]"
    text = text.replace(ways[0], ways[0].rstrip() + ', "count_words"')
    assert text.count('goto="prepare_searches"') == 1, "begin_turn's way to the searches moved"
    begin.write_text(text.replace('goto="prepare_searches"', 'goto="count_words"'), "utf-8")
    out = run(
        package,
        """
        from agentic_retrieval import InMemoryKnowledgeSource, build_graph

        source = InMemoryKnowledgeSource("docs", [{"key": "a", "content": "tram fares"}])
        graph = build_graph([source])
        ran = [
            name
            for update in graph.stream(
                {"intents": ["tram fares"]},
                context={"reasoning_effort": "minimal"},
                stream_mode="updates",
            )
            for name in update
        ]
        print(ran)
        print(graph.invoke({"intents": ["tram fares"]})["references"][0]["docKey"])
        """,
    )
    ran, doc_key = out.splitlines()
    assert ast.literal_eval(ran)[:3] == ["begin_turn", "count_words", "prepare_searches"]
    assert doc_key == "a"


def test_adding_a_hosted_source_kind_touches_definitions_and_the_kinds_registry(
    tmp_path: Path,
) -> None:
    package = copy_of_the_package(tmp_path)
    # 1. kb/definitions.py: the kind's name and parameters
    definitions = package / "kb" / "definitions.py"
    edit(
        definitions,
        'HostedSourceKind = Literal["searchIndex", "file"]',
        'HostedSourceKind = Literal["searchIndex", "file", "memo"]',
    )
    edit(
        definitions,
        '    "file": ("file_parameters", None),\n',
        '    "file": ("file_parameters", None),\n    "memo": ("memo_parameters", "with notes"),\n',
    )
    edit(
        definitions,
        "    file_parameters: FileParameters | None = None\n    cors_options",
        "    file_parameters: FileParameters | None = None\n"
        "    memo_parameters: dict[str, Any] | None = None\n    cors_options",
    )
    # 2. kb/source_kinds.py: what the service does for it (3. sources/: an existing source)
    kinds = package / "kb" / "source_kinds.py"
    edit(
        kinds,
        "SOURCE_KINDS: dict[str, HostedKind] = {kind.name: kind for kind in (SearchIndexKind(), "
        "FileKind())}",
        textwrap.dedent('''
        class MemoKind(HostedKind):
            """``memo``: notes kept in the definition itself."""

            name = "memo"
            owns_store = False

            def build(self, catalog, definition, stored):
                from agentic_retrieval.sources.memory import InMemoryKnowledgeSource

                notes = (definition.memo_parameters or {}).get("notes", [])
                documents = [{"key": f"n{i}", "content": n} for i, n in enumerate(notes)]
                return InMemoryKnowledgeSource(definition.name, documents, kind="memo")

            def documents(self, catalog, definition):
                return None

            def store_name(self, service, definition, stored):
                return None


        SOURCE_KINDS: dict[str, HostedKind] = {
            kind.name: kind for kind in (SearchIndexKind(), FileKind(), MemoKind())
        }'''),
    )
    out = run(
        package,
        f"""
        from agentic_retrieval.errors import InvalidDefinitionError
        from agentic_retrieval.kb.catalog import ServiceCatalog
        from agentic_retrieval.kb.management import put_knowledge_base, put_knowledge_source
        from agentic_retrieval.kb.service import ServiceDirectory

        service = ServiceDirectory({str(tmp_path / "data")!r})
        try:
            put_knowledge_source(service, {{"name": "bare", "kind": "memo"}})
        except InvalidDefinitionError as exc:
            print(exc)
        notes = {{"notes": ["the night tram runs on fridays", "bikes dock anywhere"]}}
        put_knowledge_source(service, {{"name": "notes", "kind": "memo", "memoParameters": notes}})
        put_knowledge_base(service, {{"name": "kb", "knowledgeSources": [{{"name": "notes"}}]}})
        kb = ServiceCatalog(service).knowledge_base("kb")
        response = kb.retrieve({{"intents": [{{"search": "night tram"}}]}})
        print(response.references[0].doc_key, response.activity[0].model_extra)
        """,
    )
    refused, found = out.splitlines()
    assert refused == "memoParameters: a memo knowledge source needs memoParameters with notes"
    assert found.startswith("n0 ")
    assert "'knowledgeSourceKind': 'memo'" in found
