"""Conversation memory across replicas: LangGraph's PostgreSQL checkpointer on the same database.

Two graphs stand for two replicas of a service: each has its own connections to the one
database that holds both the knowledge source and the checkpoints, so a conversation started
on one continues on the other.
"""

from __future__ import annotations

import pytest
from langchain_core.messages import HumanMessage

from agentic_retrieval import Context, build_graph
from agentic_retrieval.checkpointing import checkpoint_serializer

pytest.importorskip("langgraph.checkpoint.postgres")

from langgraph.checkpoint.postgres import PostgresSaver
from psycopg import Connection
from psycopg.rows import dict_row
from tests.fakes import TOY_DOCS

from agentic_retrieval.sources.postgres import PostgresKnowledgeSource

THREAD = {"configurable": {"thread_id": "rider-42"}}
MINIMAL = Context(reasoning_effort="minimal")


def replica(url: str, conn: Connection) -> object:
    """A graph with its own source and checkpointer over the shared database."""
    source = PostgresKnowledgeSource("transit", url)
    return build_graph([source], checkpointer=PostgresSaver(conn, serde=checkpoint_serializer()))


def test_a_conversation_started_on_one_replica_continues_on_another(postgres_url: str) -> None:
    seed = PostgresKnowledgeSource("transit", postgres_url, create=True)
    seed.add_documents(
        [{"id": d["key"], "title": d["title"], "text": d["content"]} for d in TOY_DOCS]
    )
    options = {"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row}
    with (
        Connection.connect(postgres_url, **options) as first_conn,
        Connection.connect(postgres_url, **options) as second_conn,
    ):
        PostgresSaver(first_conn).setup()  # its own migrations, once
        first, second = replica(postgres_url, first_conn), replica(postgres_url, second_conn)
        turn = first.invoke(
            {"messages": [HumanMessage("how much is a day pass")]}, THREAD, context=MINIMAL
        )
        assert turn["references"][0]["docKey"] == "fares#0"
        after = second.invoke(
            {"messages": [HumanMessage("where are lost items kept")]}, THREAD, context=MINIMAL
        )
        assert after["references"][0]["docKey"] == "lost#0"
        said = [m.content for m in second.get_state(THREAD).values["messages"] if m.type == "human"]
        assert said == ["how much is a day pass", "where are lost items kept"]
        assert len(first.get_state(THREAD).values["messages"]) == len(
            second.get_state(THREAD).values["messages"]
        )
