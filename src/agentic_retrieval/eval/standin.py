"""A deterministic stand-in for the chat model of an entity graph, built from its ontology.

No LLM is needed to measure what an entity graph buys: :class:`OntologyStandInModel` reads
the ontology's JSON-LD and answers the three calls a graph evaluation makes, by rule:

- **extraction** (``ExtractedTriples``): the entities are the ontology's named individuals
  (a node whose ``@type`` is one of its classes; its ``rdfs:label`` and every
  ``skos:altLabel`` are its names), and each object property's cue words are its
  ``rdfs:label`` and ``skos:altLabel`` values. In every sentence of a chunk that holds a cue
  of a property, each entity named there that fits the property's domain is linked to each
  one that fits its range (the first named is the subject when either could be; confidence
  0.5). A sentence naming no possible subject ("the bay", "it") takes the passage's first
  named one, as a reader would.
- **graph query** (``GraphQueryPlan``): the entity the question names with the longest
  name (the most specific), and everything two edges away from it, in either direction.
- **planning** (``QueryPlan``): the question as the one search query.

Anything else (evidence assessment, answer synthesis) is refused: the stand-in measures
retrieval, not answers. Its figures say what the graph buys with an extractor that finds
every named entity it was told about and links them by cue words; a real model finds other
entities, misses some and reads relations a cue list cannot, so its figures differ::

    model = OntologyStandInModel.from_ontology(Path("ontology.jsonld").read_text())
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import ConfigDict, Field

from agentic_retrieval.entitygraph import Ontology, parse_ontology
from agentic_retrieval.entitygraph.ontology import Property

STAND_IN_NAME = "ontology-stand-in"
"""The model name its activity records and reports show."""
CONFIDENCE = 0.5
_SENTENCE = re.compile(r"(?<=[.!?;])\s+|\n\s*\n")
_SKOS_ALT = ("skos:altLabel", "http://www.w3.org/2004/02/skos/core#altLabel")
_RDFS_LABEL = ("rdfs:label", "http://www.w3.org/2000/01/rdf-schema#label")


@dataclass(frozen=True)
class Entity:
    """A named individual of the ontology: its canonical name, its class, all its names."""

    name: str
    cls: str
    names: tuple[str, ...]


@dataclass(frozen=True)
class Mention:
    """An entity named in a text, where."""

    entity: Entity
    start: int


class Gazetteer:
    """The ontology's individuals and its properties' cue words, found in text by rule.

    Args:
        ontology: The parsed ontology.
        entities: Its named individuals.
        cues: Cue phrases (case-folded) by object property.
    """

    def __init__(
        self, ontology: Ontology, entities: Sequence[Entity], cues: dict[str, list[str]]
    ) -> None:
        self.ontology, self.entities, self.cues = ontology, list(entities), cues
        names = sorted(
            ((n.casefold(), e) for e in self.entities for n in e.names), key=lambda p: -len(p[0])
        )
        self._by_name = dict(names)
        alternatives = "|".join(re.escape(n) for n, _ in names) or r"(?!x)x"
        self._pattern = re.compile(rf"(?<!\w)(?:{alternatives})(?!\w)", re.IGNORECASE)

    @classmethod
    def from_ontology(cls, text: str, name: str = "ontology") -> Gazetteer:
        """Read individuals and cue words from the JSON-LD ``text`` (parsed strictly first).

        Raises:
            OntologyError: ``text`` is not an ontology of the supported subset.
        """
        ontology = parse_ontology(text, name)
        document = json.loads(text)
        nodes = document.get("@graph", []) if isinstance(document, dict) else document
        entities: list[Entity] = []
        cues: dict[str, list[str]] = {}
        for node in nodes if isinstance(nodes, list) else []:
            if not isinstance(node, dict) or not isinstance(node.get("@id"), str):
                continue
            local = _local(node["@id"])
            labels = _values(node, _RDFS_LABEL) + _values(node, _SKOS_ALT)
            types = [_local(t) for t in _as_list(node.get("@type")) if isinstance(t, str)]
            classes = [t for t in types if t in ontology.classes]
            if classes:
                names = tuple(dict.fromkeys(labels or [local]))
                entities.append(Entity(names[0], classes[0], names))
            elif local in ontology.properties and ontology.properties[local].kind == "object":
                cues[local] = [c.casefold() for c in labels]
        return cls(ontology, entities, cues)

    def mentions(self, text: str) -> list[Mention]:
        """The entities named in ``text``, in order (longest name wins where names overlap)."""
        return [
            Mention(self._by_name[m.group(0).casefold()], m.start())
            for m in self._pattern.finditer(text)
        ]

    def triples(self, text: str) -> list[dict[str, Any]]:
        """The triples the rule reads from ``text`` (see the module docstring)."""
        found: dict[tuple[str, str, str], dict[str, Any]] = {}
        everywhere = self.mentions(text)
        for sentence in _SENTENCE.split(text):
            folded = sentence.casefold()
            named = self.mentions(sentence)
            for prop, cues in self.cues.items():
                if not any(re.search(rf"(?<!\w){re.escape(c)}(?!\w)", folded) for c in cues):
                    continue
                definition = self.ontology.properties[prop]
                subjects = [m for m in named if self.ontology.fits(definition.domain, m.entity.cls)]
                if not subjects:  # "the bay", "it": the passage's subject, as a reader takes it
                    topic = self._topic(everywhere, definition)
                    subjects = [Mention(topic.entity, -1)] if topic else []
                for subject in subjects:
                    for obj in named:
                        key = (subject.entity.name, prop, obj.entity.name)
                        if subject.entity == obj.entity or key in found:
                            continue
                        if self._links(definition, subject, obj):
                            found[key] = {
                                "subject": subject.entity.name,
                                "subject_type": subject.entity.cls,
                                "predicate": prop,
                                "object": obj.entity.name,
                                "object_type": obj.entity.cls,
                                "confidence": CONFIDENCE,
                            }
        return list(found.values())

    def _topic(self, mentions: list[Mention], prop: Property) -> Mention | None:
        """The passage's first-named entity that may be ``prop``'s subject."""
        return next((m for m in mentions if self.ontology.fits(prop.domain, m.entity.cls)), None)

    def _links(self, prop: Property, subject: Mention, obj: Mention) -> bool:
        """Whether the rule links ``subject`` to ``obj`` by ``prop``.

        Both must fit the property's domain and range; when the reverse would fit as well
        (a property from a class to itself), the subject is the one named first.
        """
        fits = self.ontology.fits(prop.domain, subject.entity.cls) and self.ontology.fits(
            prop.range, obj.entity.cls
        )
        reverse = self.ontology.fits(prop.domain, obj.entity.cls) and self.ontology.fits(
            prop.range, subject.entity.cls
        )
        return fits and (not reverse or subject.start < obj.start)

    def graph_query(self, question: str) -> str:
        """A two-hop query around the most specific entity ``question`` names ('' if none)."""
        named = self.mentions(question)
        if not named:
            return ""
        first = max(named, key=lambda m: len(m.entity.name)).entity  # the most specific
        return (
            f'MATCH (a:{first.cls} {{name: "{first.name}"}})-[]-(b)-[]-(c) '
            "RETURN a.name, b.name, c.name LIMIT 20"
        )


class OntologyStandInModel(BaseChatModel):
    """A chat model that extracts and plans by rule from an ontology (no LLM, no network).

    Args:
        gazetteer: The ontology's individuals and cue words.
        model_name: The name activity records and reports show.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    gazetteer: Any = Field(exclude=True)
    model_name: str = STAND_IN_NAME
    tool_name: str | None = None

    @classmethod
    def from_ontology(cls, text: str, name: str = "ontology") -> OntologyStandInModel:
        """The stand-in for the JSON-LD ontology ``text``.

        Raises:
            OntologyError: ``text`` is not an ontology of the supported subset.
        """
        return cls(gazetteer=Gazetteer.from_ontology(text, name))

    @property
    def _llm_type(self) -> str:
        return "ontology-stand-in"

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
        *,
        tool_choice: Any = None,
        **kwargs: Any,
    ) -> Runnable[Any, AIMessage]:
        """A copy that answers as the first tool (the structured-output schema)."""
        name = convert_to_openai_tool(tools[0])["function"]["name"] if tools else None
        return self.model_copy(update={"tool_name": name})

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        text = _last_human(messages)
        args = self._answer(self.tool_name, text)
        words = sum(len(str(m.content).split()) for m in messages)
        usage = {"input_tokens": words, "output_tokens": 0, "total_tokens": words}
        call = {"name": self.tool_name or "", "args": args, "id": "call_stand_in"}
        message = AIMessage(content="", tool_calls=[call], usage_metadata=usage)
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _answer(self, tool: str | None, text: str) -> dict[str, Any]:
        if tool == "ExtractedTriples":
            return {"triples": self.gazetteer.triples(text)}
        if tool == "GraphQueryPlan":
            question = text.removeprefix("Question:").split("\n\nYour previous query", 1)[0]
            return {"gql": self.gazetteer.graph_query(question.strip())}
        if tool == "QueryPlan":
            turns = [line for line in text.splitlines() if line.startswith("human: ")]
            query = turns[-1].removeprefix("human: ") if turns else text
            return {"needs_retrieval": True, "queries": [{"query": query.strip()}]}
        raise NotImplementedError(
            f"the ontology stand-in extracts triples and writes graph and search queries; it "
            f"cannot answer {tool or 'free text'} (use minimal or low effort, extractive data)"
        )


def _last_human(messages: Sequence[BaseMessage]) -> str:
    for message in reversed(messages):
        if isinstance(message, HumanMessage):
            return str(message.content)
    return ""


def _local(iri: str) -> str:
    for sep in ("#", "/", ":"):
        if sep in iri:
            iri = iri.rsplit(sep, 1)[1]
    return iri


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [] if value is None else [value]


def _values(node: dict[str, Any], keys: tuple[str, ...]) -> list[str]:
    values: list[str] = []
    for key in keys:
        for value in _as_list(node.get(key)):
            text = value.get("@value") if isinstance(value, dict) else value
            if isinstance(text, str) and text.strip():
                values.append(text.strip())
    return values
