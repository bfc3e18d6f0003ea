"""One exception hierarchy: every library error under one base, exported by its package,
mapped to HTTP statuses in one place and reported by the command line as one line."""

from __future__ import annotations

import importlib
import inspect
import json
import pkgutil
import warnings

import pytest
from fastapi.testclient import TestClient
from tests.server_harness import intents_body, transit_kb
from typer.testing import CliRunner

import agentic_retrieval
from agentic_retrieval import errors
from agentic_retrieval.cli import app as cli_app
from agentic_retrieval.errors import (
    AgenticRetrievalError,
    AzureSourceConfigurationError,
    ConfigurationError,
    FilterNotSupportedError,
    InvalidRequestError,
    KnowledgeBaseDirectoryError,
    LoaderError,
    LocalEmbeddingsUnavailableError,
    LocalStoreError,
    MissingDependencyError,
    ModelNotConfiguredError,
    ModelRequiredError,
    ModelUnavailableError,
    ODataError,
    RerankError,
    SourceError,
    StoreError,
    UnknownKnowledgeSourceError,
    UnknownRerankerError,
)
from agentic_retrieval.server import ServerSettings, create_app

GA = "2026-04-01"

# (class, the builtin bases it had before the hierarchy, its kind)
KINDS = [
    (InvalidRequestError, (ValueError,), InvalidRequestError),
    (UnknownKnowledgeSourceError, (ValueError, LookupError), InvalidRequestError),
    (ModelRequiredError, (ValueError,), InvalidRequestError),
    (ModelNotConfiguredError, (ValueError,), ConfigurationError),
    (ModelUnavailableError, (ValueError,), ConfigurationError),
    (UnknownRerankerError, (ValueError,), ConfigurationError),
    (LocalEmbeddingsUnavailableError, (ImportError,), MissingDependencyError),
    (MissingDependencyError, (ImportError,), ConfigurationError),
    (AzureSourceConfigurationError, (ValueError,), ConfigurationError),
    (AzureSourceConfigurationError, (ValueError,), SourceError),
    (FilterNotSupportedError, (ValueError,), SourceError),
    (ODataError, (ValueError,), ODataError),
    (LoaderError, (ValueError,), LocalStoreError),
    (StoreError, (RuntimeError,), LocalStoreError),
    (KnowledgeBaseDirectoryError, (ValueError,), KnowledgeBaseDirectoryError),
    (RerankError, (RuntimeError,), RerankError),
]

# where each name is importable besides errors.py: the root and the packages that export it
# (0.2.0 removed the per-module re-exports and the 0.1-layout shims; see CHANGELOG.md)
PUBLIC_PATHS = [
    ("agentic_retrieval", "InvalidRequestError"),
    ("agentic_retrieval", "UnknownKnowledgeSourceError"),
    ("agentic_retrieval", "SourceError"),
    ("agentic_retrieval.kb", "KnowledgeBaseDirectoryError"),
    ("agentic_retrieval.rerankers", "RerankError"),
    ("agentic_retrieval.sources.azure", "AzureSourceConfigurationError"),
    ("agentic_retrieval.sources.local", "StoreError"),
    ("agentic_retrieval.odata", "ODataError"),
]

INTERFACE_ERRORS = {
    "agentic_retrieval.server.errors.ApiError",
    "agentic_retrieval.server.openai_errors.OpenAIError",
    "agentic_retrieval.cli.errors.UserError",
}
"""How an edge reports a failure (an HTTP status, an exit code); never raised to a library
caller, so deliberately outside the library's hierarchy."""


@pytest.mark.parametrize(
    ("cls", "builtins", "kind"), KINDS, ids=lambda v: getattr(v, "__name__", "")
)
def test_every_error_is_a_library_error_of_its_kind_and_keeps_its_builtin_base(cls, builtins, kind):
    assert issubclass(cls, AgenticRetrievalError)
    assert issubclass(cls, kind)
    for builtin in builtins:
        assert issubclass(cls, builtin)


@pytest.mark.parametrize(("module", "name"), PUBLIC_PATHS, ids=lambda v: v)
def test_public_import_paths_give_the_same_class(module, name):
    imported = getattr(importlib.import_module(module), name)
    assert imported is getattr(errors, name)


def test_no_exception_class_is_defined_outside_errors_py():
    stray = []
    for info in pkgutil.walk_packages(agentic_retrieval.__path__, "agentic_retrieval."):
        if info.name.endswith("__main__"):
            continue  # runs the command line on import
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            module = importlib.import_module(info.name)
        for name, obj in inspect.getmembers(module, inspect.isclass):
            if obj.__module__ != module.__name__ or not issubclass(obj, BaseException):
                continue
            if module is not errors and f"{module.__name__}.{name}" not in INTERFACE_ERRORS:
                stray.append(f"{module.__name__}.{name}")
    assert stray == []


def test_root_exports_the_base_class():
    assert agentic_retrieval.AgenticRetrievalError is AgenticRetrievalError
    assert "AgenticRetrievalError" in agentic_retrieval.__all__


def test_messages_are_unchanged():
    assert str(ModelNotConfiguredError("planning", "AGENTIC_RETRIEVAL_CHAT_MODEL")) == (
        "reasoning effort low/medium and answerSynthesis need a chat model for planning: "
        "set AGENTIC_RETRIEVAL_CHAT_MODEL (e.g. openai:gpt-4.1-mini), pass chat_model= to "
        "build_graph/KnowledgeBase, or use reasoning effort 'minimal'"
    )
    error = ODataError("unexpected 'eq'", 4, "year eq eq 3")
    assert (str(error), error.position, error.detail) == (
        "Invalid OData filter at position 4: unexpected 'eq'",
        4,
        "unexpected 'eq'",
    )
    unsupported = FilterNotSupportedError("no filters here")
    assert (unsupported.code, unsupported.message, str(unsupported)) == (
        "FilterNotSupported",
        "no filters here",
        "no filters here",
    )


# --- the server: one mapping from kinds to statuses --------------------------------------


def app_raising(monkeypatch, exc: BaseException) -> TestClient:
    kb = transit_kb()

    async def failing(*args, **kwargs):
        raise exc

    monkeypatch.setattr(kb, "aretrieve", failing)
    app = create_app(kb, settings=ServerSettings(read_env_keys=False), mcp=False)
    return TestClient(app, raise_server_exceptions=False)


def test_server_answers_client_errors_with_their_status(monkeypatch):
    missing = UnknownKnowledgeSourceError("knowledgeSourceParams: unknown knowledge source 'x'")
    with app_raising(monkeypatch, missing) as c:
        r = c.post(f"/knowledgebases/transit/retrieve?api-version={GA}", json=intents_body("x"))
    assert r.status_code == 404
    assert r.json()["error"] == {
        "code": "KnowledgeSourceNotFound",
        "message": "knowledgeSourceParams: unknown knowledge source 'x'",
        "details": [],
    }
    with app_raising(monkeypatch, InvalidRequestError("intents.0.search: empty")) as c:
        r = c.post(f"/knowledgebases/transit/retrieve?api-version={GA}", json=intents_body("x"))
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "InvalidRequest"
    assert r.json()["error"]["message"] == "intents.0.search: empty"


@pytest.mark.parametrize(
    "exc",
    [
        ModelUnavailableError("chat model 'acme:x' cannot be created: key sk-secret rejected"),
        StoreError("/srv/secret/path/transit.sqlite is a directory"),
        RerankError("grader failed: sk-secret"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_server_answers_other_library_errors_with_500_and_no_internals(monkeypatch, exc):
    with app_raising(monkeypatch, exc) as c:
        r = c.post(f"/knowledgebases/transit/retrieve?api-version={GA}", json=intents_body("x"))
    assert r.status_code == 500
    error = r.json()["error"]
    assert error["code"] == "InternalServerError"
    assert error["details"] == [{"code": "RequestId", "message": r.headers["x-ms-request-id"]}]
    assert "secret" not in r.text and type(exc).__name__ not in r.text


def test_event_stream_maps_library_errors_like_plain_responses(monkeypatch):
    from agentic_retrieval.knowledge_base import KnowledgeBase

    async def failing_stream(self, request, **kwargs):
        yield {"event": "retrieval.started", "data": {"requestId": "r"}}
        raise UnknownKnowledgeSourceError("unknown knowledge source 'x'")

    monkeypatch.setattr(KnowledgeBase, "astream", failing_stream)
    app = create_app(transit_kb(), settings=ServerSettings(read_env_keys=False), mcp=False)
    with TestClient(app) as c:
        r = c.post(
            f"/knowledgebases/transit/retrieve?api-version={GA}",
            json=intents_body("night tram"),
            headers={"accept": "text/event-stream"},
        )
    last = r.text.strip().split("\n\n")[-1].splitlines()
    assert last[0] == "event: error"
    assert json.loads(last[1].removeprefix("data: ")) == {
        "error": {
            "code": "KnowledgeSourceNotFound",
            "message": "unknown knowledge source 'x'",
            "details": [],
        }
    }


# --- the command line: every library error is one line and exit code 2 -------------------


def test_cli_reports_any_library_error_as_one_line(tmp_path):
    runner = CliRunner()
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# Ferries\n\nThe ferry leaves from Pier 3.\n")
    kb_dir = tmp_path / "kb"
    indexed = runner.invoke(
        cli_app, ["index", "--kb", str(kb_dir), "--source", "guides", str(tmp_path / "docs")]
    )
    assert indexed.exit_code == 0, indexed.output
    (database,) = kb_dir.glob("*.sqlite")
    database.unlink()
    database.mkdir()  # a store the library cannot open: StoreError
    result = runner.invoke(cli_app, ["retrieve", "--kb", str(kb_dir), "ferry pier"])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: ")
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.output


def test_error_codes_are_one_closed_list_whose_values_the_wire_carries_unchanged():
    from agentic_retrieval.errors import ErrorCode, SourceError
    from agentic_retrieval.graph.records import ErrorInfo

    assert [code.value for code in ErrorCode] == [
        "Timeout",
        "ModelOutputInvalid",
        "ModelError",
        "InvalidFilter",
        "PermissionsNotEnforced",
        "KnowledgeSourceError",
        "KnowledgeSourceUnavailable",
        "RerankerError",
        "ServiceUnavailable",
        "ServiceError",
        "InvalidRequest",
        "Unauthorized",
        "Forbidden",
        "IndexNotFound",
        "Throttled",
        "FieldNotFound",
        "SemanticConfigurationNotFound",
        "GraphNotFound",
        "GraphSearchError",
    ]
    # a record holds the plain string (what the checkpoint serializer and the wire see)
    info = ErrorInfo.of(ErrorCode.TIMEOUT, "late")
    assert type(info.code) is str and info.render() == {"code": "Timeout", "message": "late"}
    assert json.dumps(info.render()) == '{"code": "Timeout", "message": "late"}'
    raised = SourceError(ErrorCode.SERVICE_UNAVAILABLE, "down")
    assert type(raised.code) is str and raised.code == "ServiceUnavailable"
    own = ErrorInfo.of_source(SourceError("QuotaExceeded", "a custom source's own code"))
    assert own.render() == {"code": "QuotaExceeded", "message": "a custom source's own code"}
