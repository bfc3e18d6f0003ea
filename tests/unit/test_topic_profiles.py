"""``vectorSearch.topicGraphProfiles`` of an index: validated with errors naming the field,
and the profile's defaults are what a searchIndex source over the index samples with."""

from __future__ import annotations

import pytest

from agentic_retrieval.errors import InvalidDefinitionError
from agentic_retrieval.kb.definitions import parse_index
from agentic_retrieval.kb.topic_profiles import (
    require_topic_graph_version,
    topic_graph_default,
)
from agentic_retrieval.sources.topic_graph import TopicGraphSetting

FIELDS = [
    {"name": "id", "type": "Edm.String", "key": True},
    {"name": "vec", "type": "Collection(Edm.Single)", "dimensions": 4},
]
PROFILE = {"name": "themes", "indexName": "docs-topics", "defaultKind": "diverse"}


def index(profiles, fields=FIELDS):
    return {"name": "docs", "fields": fields, "vectorSearch": {"topicGraphProfiles": profiles}}


@pytest.mark.parametrize(
    ("profiles", "message"),
    [
        ([PROFILE, PROFILE | {"name": "b"}], "one topic graph profile; found 2"),
        ([PROFILE | {"defaultKind": "wide"}], "topicGraphProfiles[0].defaultKind"),
        ([{"name": "t", "defaultKind": "none"}], "topicGraphProfiles[0].indexName"),
        ([PROFILE | {"colour": 1}], "topicGraphProfiles[0].colour: unknown property"),
        (
            [PROFILE | {"defaultKind": "balanced", "defaultDiversityFactor": 0.3}],
            "defaultDiversityFactor can only be used when defaultKind is diverse",
        ),
        (
            [PROFILE | {"defaultKind": "none", "defaultMinDiversityPoolSize": 50}],
            "defaultMinDiversityPoolSize can only be used when defaultKind is diverse or balanced",
        ),
        ([PROFILE | {"defaultDiversityFactor": 1.5}], "defaultDiversityFactor"),
        ([PROFILE | {"defaultMinDiversityPoolSize": 0}], "defaultMinDiversityPoolSize"),
        ("themes", "a list of topic graph profiles"),
    ],
)
def test_a_malformed_profile_is_refused_naming_the_field(profiles, message):
    with pytest.raises(InvalidDefinitionError, match=r"vectorSearch\.topicGraphProfiles") as caught:
        parse_index(index(profiles))
    assert message in str(caught.value)


def test_a_profile_needs_the_vector_field_it_groups():
    with pytest.raises(InvalidDefinitionError, match="this index has none"):
        parse_index(index([PROFILE], fields=FIELDS[:1]))


def test_a_valid_profile_round_trips_and_gives_the_default_setting():
    profile = PROFILE | {"defaultDiversityFactor": 0.35, "defaultMinDiversityPoolSize": 300}
    parsed = parse_index(index([profile]))
    assert parsed.to_wire()["vectorSearch"] == {"topicGraphProfiles": [profile]}
    assert topic_graph_default(parsed.vector_search) == TopicGraphSetting(
        kind="diverse", diversity_factor=0.35, min_diversity_pool_size=300
    )
    assert topic_graph_default({}) is None


def test_profiles_need_the_preview_api_version():
    require_topic_graph_version(index([PROFILE]), "2026-11-01-preview")
    require_topic_graph_version({"vectorSearch": {}}, "2026-04-01")
    with pytest.raises(InvalidDefinitionError, match="need api-version 2026-11-01-preview"):
        require_topic_graph_version(index([PROFILE]), "2026-08-01-preview")
