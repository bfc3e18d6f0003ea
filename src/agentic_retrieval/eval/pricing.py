"""Cost from a user-supplied price table: USD per million input and output tokens, by model.

A price table is JSON: ``{"gpt-4.1-mini": {"input": 0.40, "output": 1.60}, "*": {...}}``;
``*`` prices any model not listed. Reasoning tokens are billed as output tokens by the
providers that report them, and are already part of ``output``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentic_retrieval.errors import PriceTableError
from agentic_retrieval.eval.usage import ModelCall

ANY_MODEL = "*"


@dataclass(frozen=True)
class Price:
    """USD per million tokens."""

    input: float
    output: float


def load_prices(source: str | Path | Mapping[str, Any]) -> dict[str, Price]:
    """Read a price table from a JSON file or a dict.

    Raises:
        PriceTableError: A missing file, invalid JSON, or an entry without numeric
            ``input`` and ``output``.
    """
    if isinstance(source, Mapping):
        data: Any = source
    else:
        path = Path(source)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise PriceTableError(f"price table {path}: {exc.strerror or exc}") from None
        except ValueError as exc:
            raise PriceTableError(f"price table {path}: invalid JSON ({exc})") from None
    if not isinstance(data, Mapping) or not data:
        raise PriceTableError("a price table maps model names to {input, output} prices")
    prices: dict[str, Price] = {}
    for model, entry in data.items():
        values = [entry.get(k) if isinstance(entry, Mapping) else None for k in ("input", "output")]
        if not all(
            isinstance(v, int | float) and not isinstance(v, bool) and v >= 0 for v in values
        ):
            raise PriceTableError(
                f"price of {model!r} needs non-negative numbers 'input' and 'output' "
                "(USD per million tokens)"
            )
        prices[str(model)] = Price(float(values[0]), float(values[1]))  # type: ignore[arg-type]
    return prices


def cost(calls: Iterable[ModelCall], prices: Mapping[str, Price]) -> tuple[float | None, set[str]]:
    """The USD cost of ``calls``, and the models the table does not price.

    Returns:
        ``(cost, unpriced)``; ``cost`` is ``None`` when any call is unpriced.
    """
    total = 0.0
    unpriced: set[str] = set()
    for call in calls:
        price = prices.get(call.model or "") or prices.get(ANY_MODEL)
        if price is None:
            unpriced.add(call.model or "(model without a name)")
            continue
        total += (call.input_tokens * price.input + call.output_tokens * price.output) / 1e6
    return (None if unpriced else total), unpriced
