"""``langgraph dev`` serves the graph named in ``langgraph.json``, offline.

A run created through langgraph-sdk on a small knowledge base returns references. The server
runs as a user runs it from their own project: started in a directory outside the checkout
(``--config`` pointing at the checkout's ``langgraph.json``) with ``AGENTIC_RETRIEVAL_KB``
relative to that directory; tracing and the version check off and no LangSmith key.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from agentic_retrieval.graph.effort import NO_MODEL_NOTE
from agentic_retrieval.kb.directory import KnowledgeBaseDirectory
from agentic_retrieval.permissions import Permissions

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(180)]

REPO = Path(__file__).resolve().parents[2]
LANGGRAPH = shutil.which("langgraph", path=str(Path(sys.executable).parent))
STARTUP_SECONDS = 90


def small_kb(root: Path) -> Path:
    docs = root / "docs"
    docs.mkdir()
    (docs / "ferries.md").write_text(
        "# Ferries\n\nThe harbour ferry to Gull Island leaves every 40 minutes from Pier 3.\n"
    )
    (docs / "parking.md").write_text(
        "# Parking\n\nPark and ride at Saltmarsh costs 4 dollars a day, free on Sundays.\n"
    )
    directory = KnowledgeBaseDirectory(root / "kb").create(name="studio-test")
    directory.add_or_update_source("guides", description="Ferry and parking guides.")
    directory.index("guides", [docs])
    staff = root / "staff"
    staff.mkdir()
    (staff / "payroll.md").write_text("# Payroll\n\nFerry crews are paid on the 25th.\n")
    directory.index("guides", [staff], permissions=Permissions(group_ids=("payroll",)))
    directory.update_settings(retrieve_defaults={"maxOutputDocuments": 1})
    directory.close()
    return root / "kb"


def start_dev(cwd: Path, kb: str, port: int, *, reload: bool) -> subprocess.Popen[bytes]:
    """``langgraph dev`` started in ``cwd`` (its own process group; output in cwd/dev.log)."""
    env = {
        **os.environ,
        "AGENTIC_RETRIEVAL_KB": kb,
        "LANGSMITH_TRACING": "false",
        "LANGCHAIN_TRACING_V2": "false",
        "LANGGRAPH_NO_VERSION_CHECK": "true",
        "LANGSMITH_API_KEY": "",
        "AGENTIC_RETRIEVAL_CHAT_MODEL": "",
    }
    args = [LANGGRAPH or "langgraph", "dev", "--no-browser", "--host", "127.0.0.1"]
    args += ["--port", str(port), "--config", str(REPO / "langgraph.json")]
    if not reload:
        args.append("--no-reload")
    with (cwd / "dev.log").open("w") as log:
        return subprocess.Popen(
            args, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(5)


@pytest.fixture(scope="module")
def dev_server(tmp_path_factory):
    if LANGGRAPH is None:
        pytest.skip("langgraph-cli[inmem] is not installed (it is in the dev extra)")
    from tests.server_harness import free_port

    root = tmp_path_factory.mktemp("studio")  # the user's project, not the checkout
    small_kb(root)
    port = free_port()
    process = start_dev(root, "./kb", port, reload=False)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + STARTUP_SECONDS
        while True:
            if process.poll() is not None:
                pytest.fail(f"langgraph dev exited: {(root / 'dev.log').read_text()[-2000:]}")
            try:
                if httpx.get(f"{url}/ok", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                tail = (root / "dev.log").read_text()[-2000:]
                pytest.fail(f"langgraph dev did not start: {tail}")
            time.sleep(0.5)
        yield url
    finally:
        stop(process)


@pytest.mark.parametrize("reload", [True, False], ids=["reloader", "no-reload"])
def test_a_knowledge_base_that_is_not_there_stops_the_server_with_one_line(tmp_path, reload):
    if LANGGRAPH is None:
        pytest.skip("langgraph-cli[inmem] is not installed (it is in the dev extra)")
    from tests.server_harness import free_port

    process = start_dev(tmp_path, "./my-kb", free_port(), reload=reload)  # as the README runs it
    try:
        process.wait(STARTUP_SECONDS)  # the reloader and its worker both stop
    finally:
        stop(process)
    assert process.returncode not in (0, None)  # a script can tell it failed
    output = (tmp_path / "dev.log").read_text()
    assert output.rstrip().splitlines()[-1].startswith("agentic-retrieval Studio: ")  # last
    ours = [line for line in output.splitlines() if "agentic-retrieval" in line]
    assert ours == [
        f"agentic-retrieval Studio: AGENTIC_RETRIEVAL_KB=./my-kb: no knowledge base directory "
        f"at {tmp_path / 'my-kb'} (a relative path is relative to the directory langgraph dev "
        f"was started in, here {tmp_path}; create one with 'agentic-retrieval index --kb "
        f"{tmp_path / 'my-kb'} --source NAME FILES...')"
    ]
    assert "Traceback" not in output
    assert not (tmp_path / "my-kb").exists()  # reading never creates


async def test_a_run_through_langgraph_sdk_returns_references(dev_server):
    from langgraph_sdk import get_client

    client = get_client(url=dev_server)
    assistants = await client.assistants.search(graph_id="agentic_retrieval")
    assert assistants, "the graph from langgraph.json is not registered"
    output = await client.runs.wait(
        None,
        "agentic_retrieval",
        input={"messages": [{"role": "user", "content": "When does the Gull Island ferry leave?"}]},
    )
    assert output["references"][0]["docKey"] == "docs-ferries-md-0"
    assert "every 40 minutes" in output["response"]
    kinds = [record["type"] for record in output["activity"]]
    assert kinds[0] == "searchIndex" and "semanticReranker" in kinds
    assert output["activity"][0]["knowledgeSourceKind"] == "local"
    # no effort set and no chat model (the server's environment has none): the model-free
    # tier ran, and the run says so once
    (reasoning,) = [r for r in output["activity"] if r["type"] == "agenticReasoning"]
    assert reasoning["retrievalReasoningEffort"] == {"kind": "minimal"}
    assert reasoning["warning"] == NO_MODEL_NOTE


async def test_a_second_turn_on_a_thread_does_not_inherit_the_first_turns_inputs(dev_server):
    """Issue 9 §1 through the server: a thread keeps the conversation, not the request."""
    from langgraph_sdk import get_client

    client = get_client(url=dev_server)
    thread = await client.threads.create()
    minimal = {"reasoning_effort": "minimal"}
    first = await client.runs.wait(
        thread["thread_id"],
        "agentic_retrieval",
        input={
            "intents": ["park and ride price"],
            "knowledge_source_params": [
                {"knowledgeSourceName": "guides", "filterAddOn": "file_name eq 'parking.md'"}
            ],
        },
        context=minimal,
    )
    assert [r["docKey"] for r in first["references"]] == ["docs-parking-md-0"]
    second = await client.runs.wait(
        thread["thread_id"],
        "agentic_retrieval",
        input={"messages": [{"role": "user", "content": "When does the Gull Island ferry leave?"}]},
        context=minimal,
    )
    arguments = second["activity"][0]["searchIndexArguments"]
    assert arguments["search"] == "When does the Gull Island ferry leave?"
    assert arguments["filter"] is None
    assert second["references"][0]["docKey"] == "docs-ferries-md-0"
    state = await client.threads.get_state(thread["thread_id"])
    assert [m["type"] for m in state["values"]["messages"]] == ["ai", "human", "ai"]
    assert "intents" not in state["values"]
    assert "knowledge_source_params" not in state["values"]


async def test_an_identity_given_in_one_turns_context_is_gone_in_the_next(dev_server):
    """Issue 9 §1 extended to identity: it lives in the run's context, never in the thread."""
    from langgraph_sdk import get_client

    client = get_client(url=dev_server)
    thread = await client.threads.create()
    question = {"messages": [{"role": "user", "content": "When are ferry crews paid?"}]}
    payroll = {"user_id": "clerk-7f3a9", "groups": ["payroll"]}
    first = await client.runs.wait(
        thread["thread_id"],
        "agentic_retrieval",
        input=question,
        context={"reasoning_effort": "minimal", "identity": payroll},
    )
    assert first["references"][0]["docKey"] == "staff-payroll-md-0"
    second = await client.runs.wait(
        thread["thread_id"],
        "agentic_retrieval",
        input=question,
        context={"reasoning_effort": "minimal"},
    )
    assert "staff-payroll-md-0" not in [r["docKey"] for r in second["references"]]
    state = await client.threads.get_state(thread["thread_id"])
    assert "identity" not in state["values"] and "clerk-7f3a9" not in str(state)


async def test_the_graph_schema_exposes_the_context(dev_server):
    from langgraph_sdk import get_client

    client = get_client(url=dev_server)
    assistant = (await client.assistants.search(graph_id="agentic_retrieval"))[0]
    schemas = await client.assistants.get_schemas(assistant["assistant_id"])
    context = schemas.get("context_schema") or schemas.get("config_schema") or {}
    assert "reasoning_effort" in str(context)
    # the bounds in Context's field metadata reach the configuration panel
    subqueries = context["properties"]["max_subqueries"]
    assert (subqueries["type"], subqueries["minimum"], subqueries["maximum"]) == ("integer", 1, 10)
    runtime = context["properties"]["max_runtime_seconds"]
    assert (runtime["type"], runtime["minimum"], runtime["maximum"]) == ("number", 0.001, 300)


async def test_the_knowledge_base_directorys_settings_apply_where_the_panel_is_silent(dev_server):
    """The directory's retrieveDefaults (maxOutputDocuments 1) apply in Studio as they do in
    the CLI and the server; what the configuration panel sets wins."""
    from langgraph_sdk import get_client

    client = get_client(url=dev_server)
    both = {"intents": ["Gull Island ferry", "park and ride dollars"]}
    panel = {"reasoning_effort": "minimal", "reranker_threshold": 0}
    capped = await client.runs.wait(None, "agentic_retrieval", input=both, context=panel)
    assert len(capped["references"]) == 1
    warnings = [r.get("warning", "") for r in capped["activity"] if r["type"] == "searchIndex"]
    assert any("exceeded maxOutputDocuments" in w for w in warnings)
    wider = await client.runs.wait(
        None, "agentic_retrieval", input=both, context={**panel, "max_output_documents": 5}
    )
    assert sorted(r["docKey"] for r in wider["references"]) == [
        "docs-ferries-md-0",
        "docs-parking-md-0",
    ]
