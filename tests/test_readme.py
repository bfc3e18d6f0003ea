"""README.md stays honest: its examples run, their output comments hold, its Quickstart is
the two make targets.

Python blocks run in one namespace, in order; blocks tagged ``server`` (```` ```python
server````) run against a server this module starts (``./my-kb`` behind ``serve --api-key
"$KEY"``, its URL in place of ``http://127.0.0.1:8080``); ``notest`` blocks are not run. A
``# ...`` comment after a ``print(...)`` is that line's output, ``...`` standing for any text,
and is checked.
"""

from __future__ import annotations

import builtins
import json
import re
import shlex
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
FENCE = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
PRINTED = re.compile(r"^\s*print\(.*\)\s+#\s?(?P<expected>.+?)\s*$")
SERVED_AT = "http://127.0.0.1:8080"
KEY = "readme-key"


def blocks(language: str, tag: str | None = None, text: str | None = None) -> list[str]:
    """The runnable blocks of ``language`` (those tagged ``tag``, or the untagged ones)."""
    found = []
    for lang, info, body in FENCE.findall(text if text is not None else README.read_text()):
        tags = info.split()
        if lang != language or "notest" in tags:
            continue
        if (tag in tags) if tag is not None else ("server" not in tags):
            found.append(body)
    return found


def matches(expected: str, printed: str) -> bool:
    """Whether ``printed`` is what the comment says (``...``: any text, also across lines)."""
    pattern = ".*".join(re.escape(part) for part in expected.split("..."))
    return re.fullmatch(pattern, printed, re.DOTALL) is not None


class OutputCheck:
    """Runs README blocks with a ``print`` that records what each README line printed."""

    def __init__(self) -> None:
        self.printed: dict[tuple[str, int], list[str]] = defaultdict(list)
        self.expected: dict[tuple[str, int], str] = {}

    def print(self, *args: Any, sep: str | None = " ", end: str | None = "\n", **kw: Any):
        builtins.print(*args, sep=sep, end=end, **kw)
        frame = sys._getframe(1)
        while frame is not None and not frame.f_code.co_filename.startswith("README.md#"):
            frame = frame.f_back
        if frame is not None and kw.get("file") is None:
            where = (frame.f_code.co_filename, frame.f_lineno)
            self.printed[where].append((sep if sep is not None else " ").join(map(str, args)))

    def run(self, bodies: list[str], namespace: dict[str, Any], label: str) -> None:
        namespace["print"] = self.print
        for number, body in enumerate(bodies):
            name = f"README.md#{label}{number}"
            for line, text in enumerate(body.splitlines(), 1):
                if found := PRINTED.match(text):
                    self.expected[(name, line)] = found["expected"]
            exec(compile(body, name, "exec"), namespace)

    def check(self) -> None:
        for where, expected in self.expected.items():
            assert where in self.printed, f"{where}: printed nothing, the comment says {expected!r}"
            printed = "\n".join(self.printed[where])
            assert matches(expected, printed), f"{where}: printed {printed!r}, not {expected!r}"


@pytest.mark.parametrize(
    ("expected", "printed", "ok"),
    [
        ("remote", "remote", True),
        ("remote", "remote work", False),
        ("200", "206", False),
        ("1.0", "0.63", False),
        ('[{"ref_id":0,...}]', '[{"ref_id":0,"x":1}]', True),
        ("2 indexed, ...", "2 indexed, 0 failed", True),
        ("| a | ...", "| a | b |\n|---|", True),
    ],
)
def test_output_comments_are_matched_as_written(expected, printed, ok):
    assert matches(expected, printed) is ok


def test_quickstart_is_exactly_make_demo_and_make_test():
    quickstart = README.read_text().split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    commands = [
        line.split("#", 1)[0].strip()
        for body in FENCE.findall(quickstart)
        for line in body[2].splitlines()
        if line.strip()
    ]
    assert commands == ["make demo", "make test"]


def test_make_targets_exist():
    makefile = (README.parent / "Makefile").read_text()
    assert re.search(r"^demo:", makefile, re.MULTILINE)
    assert re.search(r"^test:", makefile, re.MULTILINE)
    ci = (README.parent / ".ci" / "run").read_text()
    assert "make test" in ci


def test_python_examples_run_and_print_what_they_say(monkeypatch):
    monkeypatch.delenv("AGENTIC_RETRIEVAL_CHAT_MODEL", raising=False)
    code = blocks("python")
    assert code, "the README should have runnable Python examples"
    namespace: dict = {}
    output = OutputCheck()
    output.run(code, namespace, "python")
    output.check()
    assert len(output.expected) >= 10  # the comments are there to be checked
    response = namespace["response"]
    assert response.references[0].doc_key == "remote"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """``./my-kb`` (the README's two documents) served with ``--api-key $KEY``: (dir, URL)."""
    from agentic_retrieval.kb.directory import KnowledgeBaseDirectory
    from agentic_retrieval.kb.loader import open_knowledge_base
    from agentic_retrieval.server import ServerSettings, create_app
    from tests.server_harness import running_server

    root = tmp_path_factory.mktemp("readme-served")
    write_docs(root)
    directory = KnowledgeBaseDirectory(root / "my-kb").create(name="my-kb")
    directory.add_or_update_source("handbook", description="Employee handbook")
    directory.index("handbook", [root / "docs"])
    directory.close()
    settings = ServerSettings(api_keys=[KEY], read_env_keys=False)
    app = create_app([open_knowledge_base(root / "my-kb")], settings=settings)
    with running_server(app) as url:
        yield root, url


@pytest.fixture
def as_a_user(served, monkeypatch):
    """In the README's directory, with ``$KEY`` set and ``agentic-retrieval`` on the PATH."""
    root, url = served
    monkeypatch.chdir(root)
    monkeypatch.setenv("KEY", KEY)
    monkeypatch.delenv("AGENTIC_RETRIEVAL_CHAT_MODEL", raising=False)
    scripts = str(Path(sys.executable).parent)
    monkeypatch.setenv("PATH", f"{scripts}:{__import__('os').environ.get('PATH', '')}")
    return root, url


def test_python_examples_run_against_a_server(as_a_user):
    """The Azure SDK and MCP clients, over HTTP and stdio, as a user would run them."""
    _, url = as_a_user
    code = [body.replace(SERVED_AT, url) for body in blocks("python", "server")]
    assert len(code) >= 2 and any("streamable_http_client" in body for body in code)
    output = OutputCheck()
    output.run(code, {}, "server")
    output.check()
    assert len(output.expected) >= 4


def mcp_host_configurations() -> list[tuple[str, dict[str, Any]]]:
    """Every server entry of the JSON blocks in the MCP section: (name, entry)."""
    section = README.read_text().split("### MCP", 1)[1].split("\n## ", 1)[0]
    entries = []
    for body in blocks("json", text=section):
        config = json.loads(body)
        for name, entry in {**config.get("mcpServers", {}), **config.get("servers", {})}.items():
            entries.append((name, entry))
    return entries


def test_the_mcp_host_configurations_start_and_answer(as_a_user):
    """Each desktop/IDE snippet, its placeholders filled as a user fills them, connects."""
    import asyncio

    import httpx2
    from mcp import Client, StdioServerParameters
    from mcp.client.streamable_http import streamable_http_client

    root, url = as_a_user
    entries = mcp_host_configurations()
    assert {"stdio", "http"} <= {e.get("type", "stdio" if "command" in e else "http")
                                 for _, e in entries}  # fmt: skip

    def client_for(entry: dict[str, Any]) -> Any:
        if "command" in entry:
            assert Path(entry["command"]).name == "agentic-retrieval"
            assert Path(entry["command"]).is_absolute()  # hosts do not see the virtualenv
            args = [a.replace("/path/to/my-kb", str(root / "my-kb")) for a in entry["args"]]
            env = {**entry.get("env", {}), "AGENTIC_RETRIEVAL_CHAT_MODEL": ""}  # offline here
            script = str(Path(sys.executable).with_name("agentic-retrieval"))
            return Client(StdioServerParameters(command=script, args=args, env=env))
        headers = {k: v.replace("${input:kb-key}", KEY) for k, v in entry["headers"].items()}
        http = httpx2.AsyncClient(headers=headers, timeout=60)
        return Client(
            streamable_http_client(entry["url"].replace(SERVED_AT, url), http_client=http)
        )

    async def ask(entry: dict[str, Any]) -> dict[str, Any]:
        async with client_for(entry) as client:
            result = await client.call_tool(
                "knowledge_base_retrieve", {"query": "vacation days", "effort": "minimal"}
            )
        assert not result.is_error, result.content
        return result.structured_content

    for name, entry in entries:
        answer = asyncio.run(ask(entry))
        assert answer["references"][0]["docKey"] == "docs-vacation-md-0", name


def test_the_readmes_output_folders_are_git_ignored():
    """Running the README's commands in the checkout leaves nothing for git to pick up."""
    ignored = {line.strip() for line in (README.parent / ".gitignore").read_text().splitlines()}
    folders = {
        path.removeprefix("./")
        for body in blocks("bash") + [b for lang, info, b in FENCE.findall(README.read_text())
                                      if lang == "bash" and "notest" in info]
        for option, path in re.findall(r"(--output|--kb|--data) (\./[\w.-]+)", body)
    }  # fmt: skip
    assert {"eval-report", "my-kb"} <= folders
    assert sorted(f for f in folders if f"/{f}/" not in ignored) == []


def write_docs(root: Path) -> None:
    """The two documents the README's commands index (``./docs``)."""
    docs = root / "docs"
    docs.mkdir()
    (docs / "vacation.md").write_text(
        "# Vacation\n\nFull-time employees get 25 vacation days a year.\n"
    )
    (docs / "travel.md").write_text("# Travel\n\nBook trains for trips under 600 km.\n")


@pytest.mark.parametrize("snippet", ["from agentic_retrieval import", "as_retriever"])
def test_readme_mentions_the_public_api(snippet):
    assert snippet in README.read_text()


def cli_lines() -> list[str]:
    return [
        line.strip()
        for body in blocks("bash")
        for line in body.splitlines()
        if line.strip().startswith("agentic-retrieval ")
    ]


def test_readme_cli_commands_run(tmp_path, monkeypatch):
    from agentic_retrieval.wire.models import RetrieveResponse

    monkeypatch.delenv("AGENTIC_RETRIEVAL_CHAT_MODEL", raising=False)
    write_docs(tmp_path)
    (tmp_path / "questions.jsonl").write_text(
        '{"id": "v", "question": "vacation days", "relevant": ["docs/vacation.md"]}\n'
    )
    (tmp_path / "products.csv").write_text(
        "sku,name,description,price\nA-1,Red kettle,A red kettle.,29.9\nB-2,Blue mug,A mug.,7\n"
    )
    script = Path(sys.executable).with_name("agentic-retrieval")
    lines = cli_lines()
    assert len(lines) >= 3
    outputs = {}
    for line in lines:
        argv = [str(script), *shlex.split(line)[1:]]
        done = subprocess.run(
            argv, cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False
        )
        assert done.returncode == 0, (line, done.stderr)
        outputs[line] = done.stdout
    vacation = next(line for line in lines if "--json" in line and "vacation" in line)
    response = RetrieveResponse.model_validate(json.loads(outputs[vacation]))
    assert response.references[0].doc_key.startswith("docs-vacation-md")
    assert "25 vacation days" in response.text
    mug = next(line for line in lines if "--json" in line and "mug" in line)
    products = RetrieveResponse.model_validate(json.loads(outputs[mug]))
    assert [r.doc_key for r in products.references] == ["B-2#0"]
    evaluated = json.loads((tmp_path / "eval-report" / "report.json").read_text())
    assert [c["summary"]["nDCG@10"] for c in evaluated["configurations"]] == [1.0, 1.0]


def test_the_install_notes_name_real_extras():
    """Each section's ``*Install: ...*`` line names extras the package has."""
    import tomllib

    extras = set(
        tomllib.loads((README.parent / "pyproject.toml").read_text())["project"][
            "optional-dependencies"
        ]
    )
    notes = re.findall(r"^\*Install: (.+?)\*$", README.read_text(), re.MULTILINE | re.DOTALL)
    assert len(notes) >= 8
    named = {word for note in notes for word in re.findall(r"`([a-z]+)`", note)}
    assert named and named <= extras, named - extras
    for heading in ("### 1. Import it", "### 2. Debug it in LangGraph Studio", "## Rerankers"):
        section = README.read_text().split(f"{heading}\n", 1)[1]
        assert section.lstrip().startswith("*Install: "), heading


def pyproject_extras() -> dict[str, list[str]]:
    import tomllib

    project = tomllib.loads((README.parent / "pyproject.toml").read_text())["project"]
    return project["optional-dependencies"]


def test_the_dev_extra_is_said_to_leave_out_exactly_what_it_leaves_out():
    paragraph = README.read_text().split("Add extras in the checkout", 1)[1].split("\n\n", 1)[0]
    listed = set(re.findall(r'"\.\[(\w+)\]"', paragraph))
    left_out = set(re.findall(r"`(\w+)`", paragraph.split("it includes the others but", 1)[1]))
    extras = pyproject_extras()
    included = {
        name for requirement in extras["dev"] for name in re.findall(r"\[([\w,]+)\]", requirement)
        for name in name.split(",")
    }  # fmt: skip
    assert listed <= set(extras)
    assert left_out == listed - included - {"dev"}


def test_an_offline_medium_effort_example_runs_with_the_others():
    """A runnable block (test_python_examples_run_and_print_what_they_say runs each) scripts
    a chat model, so low and medium effort can be tried without a key or a notebook."""
    scripted = [b for b in blocks("python") if "ScriptedChatModel(" in b]
    assert scripted, "no runnable README example uses ScriptedChatModel"
    assert any('"kind": "medium"' in b for b in scripted)


def test_the_notebooks_run_with_what_the_readme_says():
    section = README.read_text().split("### 3. Experiment in notebooks\n", 1)[1]
    section = section.split("\n## ", 1)[0]
    install = section.lstrip().split("\n\n", 1)[0]
    assert "`make notebooks`" in install and "`dev`" in install
    makefile = (README.parent / "Makefile").read_text()
    recipe = makefile.split("\nnotebooks: ", 1)[1].split("\n\n", 1)[0]
    assert recipe.startswith("install-dev") and "tests/test_notebooks.py --write" in recipe
    dev = " ".join(pyproject_extras()["dev"])
    assert "nbclient" in dev and "ipykernel" in dev  # what tests/test_notebooks.py runs them with
    for tool in re.findall(r"jupyter[ -](nbconvert|lab|notebook)\b", README.read_text()):
        assert tool in dev, f"the README runs jupyter {tool}, which the dev extra lacks"


def headings(text: str) -> list[tuple[int, str]]:
    """``(level, title)`` of each Markdown heading outside code blocks, in order."""
    prose = FENCE.sub("", text)
    return [(len(m[1]), m[2].strip()) for m in re.finditer(r"^(#{1,6}) (.+)$", prose, re.M)]


def anchor(title: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")


def section(title: str) -> str:
    return README.read_text().split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_the_contents_link_every_section_and_each_link_lands_on_one():
    text = README.read_text()
    titles = headings(text)
    anchors = {anchor(t) for _, t in titles}
    assert len(anchors) == len(titles), "two headings share an anchor"
    contents = section("Contents")
    links = re.findall(r"\]\(#([^)]+)\)", contents)
    assert sorted(set(links) - anchors) == []
    chapters = [anchor(t) for level, t in titles if level == 2 and t != "Contents"]
    assert [c for c in chapters if c not in links] == []
    assert [c for c in links if c in chapters] == chapters  # in the README's order


def test_the_first_hour_comes_first_and_links_down():
    text = README.read_text()
    chapters = [t for level, t in headings(text) if level == 2]
    assert chapters[:3] == ["Contents", "Your first hour", "Quickstart"]
    first_hour = section("Your first hour")
    anchors = {anchor(t) for _, t in headings(text)}
    links = re.findall(r"\]\(#([^)]+)\)", first_hour)
    assert sorted(set(links) - anchors) == []
    for step in ("quickstart", "the-embedded-default-a-knowledge-base-on-disk", "1-import-it",
                 "serving", "as-a-tool-for-agents"):  # fmt: skip
        assert step in links, step


def test_the_first_hour_commands_are_run():
    """Its shell lines are in runnable blocks (test_readme_cli_commands_run runs them in
    order, before the sections'), and the make targets it names are what CI runs."""
    first_hour = section("Your first hour")
    shell = [body for lang, info, body in FENCE.findall(first_hour) if lang == "bash"]
    assert shell and all(body in blocks("bash") for body in shell)
    lines = [line for body in shell for line in body.splitlines() if line.strip()]
    assert lines and all(line in cli_lines() for line in lines)
    ci = (README.parent / ".ci" / "run").read_text()
    for target in re.findall(r"`(make \w+)`", first_hour):
        assert target in ci, target
