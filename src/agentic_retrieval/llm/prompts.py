"""Every prompt the graph sends, as named constants.

They are the defaults of the matching :class:`~agentic_retrieval.context.Context` fields, so a
run (or LangGraph Studio) can override any of them without code changes. Placeholders in
braces are filled with ``str.format``.
"""

ROUTING_AND_PLANNING_PROMPT = """\
You are the query planner of a retrieval system. Today is {today}.

First decide whether answering the user's latest message needs a search of the knowledge \
sources. It does NOT when the message is a greeting, thanks, small talk, or a question the \
conversation itself already answers; then set needs_retrieval to false and write a short, \
friendly assistant_message. Otherwise set needs_retrieval to true.

When retrieval is needed, rewrite the conversation into at most {max_subqueries} focused \
search queries. Each query must stand alone (resolve pronouns and references from the \
conversation), target one aspect of the question, and use the vocabulary a document would \
use. Give each a short retrieval goal. Choose, for each query, the knowledge sources most \
likely to hold the answer, by name, from this list:
{sources}
Add an OData filter only when the user states an explicit constraint on a field listed for a \
source (for example year ge 2020); otherwise leave filter empty. Never invent field names."""

EVIDENCE_PROMPT = """\
You judge whether retrieved passages are enough to answer a question. Today is {today}.

Read the passages; each starts with its ref_id. Decide is_sufficient (can the question be \
answered completely and only from these passages?) and a calibrated confidence between 0 \
and 1. List the key points the passages establish, each with the ref_ids that support it. \
If something needed is missing, say what in missing_information and propose at most \
{max_subqueries} follow-up search queries that would find it (different wording from the \
queries already run: {previous_queries}). Do not propose follow-ups when sufficient."""

ANSWER_PROMPT = """\
You answer questions using only the numbered passages below. Today is {today}.

Write a concise Markdown answer. After every sentence that states a fact, cite the passage \
it comes from as [ref_id:N], using only ref_ids that appear below. Do not use outside \
knowledge. If the passages do not contain what is needed, say plainly what is missing \
instead of guessing.{missing}

Passages:
{passages}"""

RETRIEVAL_INSTRUCTIONS_SECTION = """

The knowledge base's owner gives these retrieval instructions. Follow them when choosing \
knowledge sources and writing queries; they are settings, not the user's question, and they \
never widen or remove a filter:
<retrieval_instructions>
{instructions}
</retrieval_instructions>"""
"""Appended to the planning prompt when the knowledge base has ``retrievalInstructions``."""

ANSWER_INSTRUCTIONS_SECTION = """

The knowledge base's owner gives these answer instructions. Follow them for tone, format and \
scope, while still citing passages and using only the passages above:
<answer_instructions>
{instructions}
</answer_instructions>"""
"""Appended to the answer prompt when the knowledge base has ``answerInstructions``."""

NO_EVIDENCE_ANSWER = (
    "I could not find information in the knowledge sources to answer this question{topic}."
)
"""The answer when retrieval returned nothing usable (no LLM call is made)."""

GRADE_SCALE = """\
4 = the passage answers the query directly and completely
3 = relevant, answers part of the query
2 = on the topic of the query but answers little of it
1 = barely related
0 = irrelevant"""

LISTWISE_GRADER_PROMPT = f"""\
You grade how well search-result passages answer a search query.

Grade every passage on this scale:
{GRADE_SCALE}

Judge each passage on its own text only, not on what you know. Fractions such as 2.5 are
allowed. Return exactly one grade for every passage id you are given, using the ids as shown
(p1, p2, ...)."""
"""System prompt of the listwise grader: the human message lists the query and passages."""

POINTWISE_GRADER_PROMPT = f"""\
You grade how well one search-result passage answers a search query.

Use this scale:
{GRADE_SCALE}

Judge the passage on its own text only, not on what you know. Fractions such as 2.5 are
allowed. Return the grade for the passage."""
"""System prompt of the pointwise grader: the human message holds the query and one passage."""

GRAPH_EXTRACTION_PROMPT = """\
You extract a knowledge graph from one passage of a document, using only this ontology:

{ontology}

Return every fact the passage states as a triple: the subject's name and class, the property,
and the object's name and class (for a property whose object is a value, the value itself and
no class). Use only the classes and properties listed; leave out facts that do not fit them.
Name entities as the passage does, in full (not "it" or "the company"). Give each triple a
confidence between 0 and 1 that the passage states it."""
"""System prompt of graph extraction: the human message holds the passage."""

GRAPH_QUERY_PROMPT = """\
You write one graph query that finds the facts a question needs, in this subset of GQL:

MATCH (a:Class {{name: "Exact Name"}})-[:property]->(b:Class)-[:property]->(c)
WHERE b.name CONTAINS "text" AND c.type = "Class"
RETURN a.name, b.name, c.name
LIMIT 20

A pattern has 1 to 3 edges; an edge is -[:property]->, <-[:property]- or -[:property]-.
Filters compare name, id or type with a quoted string by =, <> or CONTAINS, joined by AND.
Use only the classes and properties of this ontology:

{ontology}"""
"""System prompt of the graph query writer: the human message holds the question (and the
error of the previous attempt, when there was one)."""
