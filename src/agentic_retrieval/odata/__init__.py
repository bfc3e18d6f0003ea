"""OData ``$filter`` expressions as Azure AI Search understands them: parse, evaluate, to SQL.

Supported subset:

- comparisons ``eq ne gt ge lt le`` between a field path and a literal (either side);
- ``and``, ``or``, ``not`` and parentheses, with Azure's precedence
  (``not`` > comparison > ``and`` > ``or``); as in Azure, ``not`` applies to the operand right
  after it, so a negated comparison needs parentheses: ``not (rating gt 3)``;
- literals: ``'strings'`` (``''`` escapes a quote), numbers, ``true``/``false``, ``null`` and
  ISO 8601 date-times with an offset (``2024-01-01T00:00:00Z``);
- ``search.in(field, 'a,b,c')`` with an optional third argument listing delimiter characters
  (default: space and comma);
- collection lambdas ``tags/any(t: t eq 'x')``, ``tags/all(t: ...)`` and ``tags/any()``
  (non-empty);
- bare boolean fields (``isActive``) and field paths with ``/`` (``address/city``).

Limits (each an :class:`ODataError`, i.e. a 400 over HTTP): at most ``MAX_FILTER_LENGTH``
characters, ``MAX_NESTING`` levels of parentheses/``not``/lambdas, ``MAX_CONDITIONS``
conditions joined by ``and``/``or``; integers are ``Edm.Int64`` and numbers must be finite.

Semantics shared by the Python evaluator and the SQL compiler (the local store uses SQL, the
in-memory sources use Python; both give the same answer on the same record):

- a missing field is ``null``; ``x eq null`` is true only for null, ``ne`` is the negation of
  ``eq`` (so ``x ne 'a'`` is true when ``x`` is null), and ordering operators are false when
  either side is null;
- values compare only within a type family: strings with strings, numbers with numbers, date-times
  with date-times (record strings holding ISO 8601 date-times are parsed); booleans count as the
  numbers 1 and 0 because SQLite's JSON functions store them that way;
- ``any``/``all`` apply to lists; anything else is an empty collection.
"""

from agentic_retrieval.errors import ODataError
from agentic_retrieval.odata.ast import (
    MAX_CONDITIONS,
    MAX_FILTER_LENGTH,
    MAX_NESTING,
    All,
    And,
    Any_,
    BoolField,
    Compare,
    ComparisonOp,
    Constant,
    Expr,
    Field,
    Literal,
    Not,
    Or,
    SearchIn,
)
from agentic_retrieval.odata.compose import and_filters
from agentic_retrieval.odata.evaluate import compile_predicate, evaluate_filter
from agentic_retrieval.odata.fields import (
    FieldKind,
    FieldSchema,
    FilterFieldError,
    check_fields,
    describe_schema,
    filter_field_names,
    merge_schemas,
)
from agentic_retrieval.odata.parser import parse_filter
from agentic_retrieval.odata.sql import to_sql

__all__ = [
    "MAX_CONDITIONS",
    "MAX_FILTER_LENGTH",
    "MAX_NESTING",
    "All",
    "And",
    "Any_",
    "BoolField",
    "Compare",
    "ComparisonOp",
    "Constant",
    "Expr",
    "Field",
    "FieldKind",
    "FieldSchema",
    "FilterFieldError",
    "Literal",
    "Not",
    "ODataError",
    "Or",
    "SearchIn",
    "and_filters",
    "check_fields",
    "compile_predicate",
    "describe_schema",
    "evaluate_filter",
    "filter_field_names",
    "merge_schemas",
    "parse_filter",
    "to_sql",
]
