"""Create an Azure AI Search index for chunks and upload them (optional helper).

:class:`~agentic_retrieval.sources.azure.AzureSearchKnowledgeSource` works with any existing
index. This helper is for starting from scratch: it defines an index whose field names match the
source's defaults (``id``, ``title``, ``content`` plus filterable metadata fields), with a
semantic configuration and, optionally, a vector field searched through an index vectorizer,
creates it when absent, and uploads chunks (dicts with ``id``, ``title``, ``content`` and
``metadata``, as the ingestion pipeline produces them) with the SDK's
``SearchIndexingBufferedSender``, which batches and retries per document.

Requires the ``[azure]`` extra.
"""

from __future__ import annotations

import base64
import logging
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentic_retrieval.errors import AzureSourceConfigurationError
from agentic_retrieval.sources.azure.source import resolve_credential

logger = logging.getLogger(__name__)

_VALID_KEY = re.compile(r"[A-Za-z0-9_\-=]+\Z")
_VECTOR_PROFILE = "agentic-retrieval-vector-profile"
_VECTOR_ALGORITHM = "agentic-retrieval-hnsw"


@dataclass
class UploadReport:
    """What :func:`upload_chunks` did.

    Attributes:
        succeeded: Keys of the documents the service accepted.
        failed: Keys of the documents that failed after the sender's retries.

    """

    succeeded: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)


def document_key(raw: str) -> str:
    """Return ``raw`` if Azure accepts it as a document key, else its URL-safe base64 form.

    Keys may only hold letters, digits, ``_``, ``-`` and ``=``; chunk ids such as
    ``guide.pdf#p3-c2`` are encoded so they stay unique and reversible.
    """
    if _VALID_KEY.match(raw):
        return raw
    return base64.urlsafe_b64encode(raw.encode("utf-8")).decode("ascii")


def build_index(
    name: str,
    *,
    key_field: str = "id",
    title_field: str = "title",
    content_field: str = "content",
    metadata_fields: Mapping[str, str] | None = None,
    semantic_configuration: str | None = "default",
    vector_field: str | None = None,
    vector_dimensions: int | None = None,
    vectorizer: Any = None,
) -> Any:
    """Define a ``SearchIndex`` for chunks.

    Args:
        name: Index name.
        key_field: The key field.
        title_field: A searchable title field (the semantic configuration's title).
        content_field: The searchable content field (the semantic configuration's content).
        metadata_fields: Filterable, facetable fields as name -> EDM type
            (``"Edm.String"``, ``"Edm.Int32"``, ``"Collection(Edm.String)"``...).
        semantic_configuration: Name of the semantic configuration to define, or ``None``.
        vector_field: Name of a ``Collection(Edm.Single)`` field, or ``None`` for text only.
        vector_dimensions: Its dimensionality (required with ``vector_field``).
        vectorizer: A ``VectorSearchVectorizer`` (e.g. ``AzureOpenAIVectorizer``) the service
            uses to vectorize query text; its ``vectorizer_name`` is wired to the field's profile.

    Returns:
        An ``azure.search.documents.indexes.models.SearchIndex``.

    Raises:
        ValueError: ``vector_field`` without ``vector_dimensions``.

    """
    from azure.search.documents.indexes import models as m

    fields = [
        m.SimpleField(name=key_field, type="Edm.String", key=True, filterable=True),
        m.SearchableField(name=title_field),
        m.SearchableField(name=content_field),
    ]
    fields += [
        m.SimpleField(name=n, type=t, filterable=True, facetable=True)
        for n, t in (metadata_fields or {}).items()
    ]
    index = m.SearchIndex(name=name, fields=fields)
    if semantic_configuration:
        index.semantic_search = m.SemanticSearch(
            configurations=[
                m.SemanticConfiguration(
                    name=semantic_configuration,
                    prioritized_fields=m.SemanticPrioritizedFields(
                        title_field=m.SemanticField(field_name=title_field),
                        content_fields=[m.SemanticField(field_name=content_field)],
                    ),
                )
            ]
        )
    if vector_field:
        if not vector_dimensions:
            raise ValueError("vector_field needs vector_dimensions")
        fields.append(
            m.SearchField(
                name=vector_field,
                type="Collection(Edm.Single)",
                searchable=True,
                vector_search_dimensions=vector_dimensions,
                vector_search_profile_name=_VECTOR_PROFILE,
            )
        )
        index.vector_search = m.VectorSearch(
            algorithms=[m.HnswAlgorithmConfiguration(name=_VECTOR_ALGORITHM)],
            profiles=[
                m.VectorSearchProfile(
                    name=_VECTOR_PROFILE,
                    algorithm_configuration_name=_VECTOR_ALGORITHM,
                    vectorizer_name=getattr(vectorizer, "vectorizer_name", None),
                )
            ],
            vectorizers=[vectorizer] if vectorizer is not None else None,
        )
        index.fields = fields
    return index


def ensure_index(endpoint: str, credential: Any, index: Any, **client_kwargs: Any) -> bool:
    """Create ``index`` unless an index of that name exists.

    Args:
        endpoint: Service URL.
        credential: As for :class:`~agentic_retrieval.sources.azure.AzureSearchKnowledgeSource`.
        index: The ``SearchIndex`` (see :func:`build_index`).
        **client_kwargs: Passed to ``SearchIndexClient``.

    Returns:
        ``True`` when the index was created, ``False`` when it already existed.

    """
    from azure.core.exceptions import ResourceNotFoundError
    from azure.search.documents.indexes import SearchIndexClient

    client = SearchIndexClient(endpoint, resolve_credential(credential), **client_kwargs)
    try:
        try:
            client.get_index(index.name)
        except ResourceNotFoundError:
            client.create_index(index)
            logger.info("created index %s", index.name)
            return True
        return False
    finally:
        client.close()


def chunk_to_document(
    chunk: Mapping[str, Any],
    *,
    key_field: str = "id",
    title_field: str = "title",
    content_field: str = "content",
    metadata_fields: Sequence[str] = (),
) -> dict[str, Any]:
    """Map one chunk dict to an index document.

    Metadata fields are taken from ``chunk["metadata"]`` (or the chunk itself) and only those
    named are kept, since the service rejects fields the index does not define.
    """
    metadata = chunk.get("metadata") or {}
    document: dict[str, Any] = {
        key_field: document_key(str(chunk["id"])),
        title_field: chunk.get("title"),
        content_field: chunk.get("content", ""),
    }
    for name in metadata_fields:
        if name in metadata:
            document[name] = metadata[name]
        elif name in chunk:
            document[name] = chunk[name]
    return document


def upload_chunks(
    endpoint: str,
    index_name: str,
    credential: Any,
    chunks: Iterable[Mapping[str, Any]],
    *,
    key_field: str = "id",
    title_field: str = "title",
    content_field: str = "content",
    metadata_fields: Sequence[str] = (),
    vector_field: str | None = None,
    embed: Callable[[list[str]], list[list[float]]] | None = None,
    batch_size: int = 512,
    **client_kwargs: Any,
) -> UploadReport:
    """Upload (merge-or-upload) chunks to an index in buffered batches.

    Args:
        endpoint: Service URL.
        index_name: Target index (must exist, see :func:`ensure_index`).
        credential: As for the knowledge source.
        chunks: Dicts with ``id``, ``title``, ``content`` and optional ``metadata``.
        key_field: Index key field.
        title_field: Index title field.
        content_field: Index content field.
        metadata_fields: Metadata keys to copy into same-named index fields.
        vector_field: Field receiving ``embed(content)``; needs ``embed``.
        embed: Embeds a batch of contents (e.g. ``Embeddings.embed_documents``).
        batch_size: Documents per indexing request.
        **client_kwargs: Passed to ``SearchIndexingBufferedSender``.

    Returns:
        The keys that succeeded and failed.

    Raises:
        AzureSourceConfigurationError: ``vector_field`` without ``embed``.

    """
    from azure.search.documents import SearchIndexingBufferedSender

    if vector_field and embed is None:
        raise AzureSourceConfigurationError("InvalidArgument", "vector_field needs embed")
    documents = [
        chunk_to_document(
            c,
            key_field=key_field,
            title_field=title_field,
            content_field=content_field,
            metadata_fields=metadata_fields,
        )
        for c in chunks
    ]
    if vector_field and embed is not None:
        vectors = embed([str(d[content_field]) for d in documents])
        for document, vector in zip(documents, vectors, strict=True):
            document[vector_field] = list(vector)
    report = UploadReport()
    sender = SearchIndexingBufferedSender(
        endpoint,
        index_name,
        resolve_credential(credential),
        auto_flush=False,
        initial_batch_action_count=batch_size,
        on_progress=lambda action: report.succeeded.append(str(action[key_field])),
        on_error=lambda action: report.failed.append(str(action[key_field])),
        **client_kwargs,
    )
    with sender:
        for start in range(0, len(documents), batch_size):
            sender.merge_or_upload_documents(documents[start : start + batch_size])
            sender.flush()
    logger.info(
        "uploaded %d chunks to %s (%d failed)",
        len(report.succeeded),
        index_name,
        len(report.failed),
    )
    return report
