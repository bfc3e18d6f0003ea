"""How much converting one file may cost: sizes, counts, time and memory.

A file is refused, never truncated, when it would cross a limit: the
:class:`~agentic_retrieval.errors.ConversionLimitError` names the limit, its value and what
the file claimed, so the one file fails (a 413 for an upload, a failed file in ``index``)
and nothing is indexed halfway. The content limits (ZIP package, rows, cells, extracted
text) are checked wherever a file is converted; ``seconds`` and ``memory_mb`` bound the child
process the server converts uploads in (:mod:`.conversion`).

Why these defaults (measured in ``benchmarks/README.md``, hostile files):

- ``zip_ratio`` 100 and member/total sizes: Apache POI's defaults for Office files (a ZIP
  member that inflates more than 100 times is how a 2 MB ``.docx`` becomes gigabytes of XML);
  members under 1 MiB are never ratio-checked (tiny parts cannot be bombs).
- ``rows`` and ``cells``: a CSV row is a chunk; 100,000 rows index in about 15 s and a
  million spreadsheet cells convert in seconds, so the largest file accepted stays cheap.
- ``xml_depth`` 256: libxml2's default; genuine documents nest a few dozen deep.
- ``text_chars``: 16 Mi characters, the extraction limit of Azure AI Search's largest tier.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass

MIB = 1024 * 1024
RATIO_CHECK_FROM_BYTES = MIB
"""Members smaller than this (uncompressed) are not ratio-checked."""


@dataclass(frozen=True, slots=True)
class ConversionLimits:
    """The most one file may cost to convert (each field is a limit's name).

    Attributes:
        seconds: Wall-clock time for one conversion in a child process (the server's).
        memory_mb: How far a conversion child's address space may grow, in MiB.
        text_chars: Characters of text one file may yield.
        rows: Rows of a CSV or spreadsheet, elements of a JSON array.
        cells: Cells of a CSV or spreadsheet (empty cells inside a row count: they are laid
            out).
        zip_members: Members of an Office (ZIP) package.
        zip_member_mb: Uncompressed size of one member, in MiB.
        zip_total_mb: Uncompressed size of all members together, in MiB.
        zip_ratio: How many times a member (of at least 1 MiB) may inflate.
        xml_depth: How deeply the XML of a DOCX or PPTX may nest elements.
    """

    seconds: float = 60.0
    memory_mb: int = 1024
    text_chars: int = 16 * MIB
    rows: int = 100_000
    cells: int = 1_000_000
    zip_members: int = 10_000
    zip_member_mb: int = 128
    zip_total_mb: int = 256
    zip_ratio: int = 100
    xml_depth: int = 256

    def __post_init__(self) -> None:
        """Every limit is positive."""
        for name, value in self.items():
            if not value > 0:
                raise ValueError(f"conversion limit {name} must be positive, not {value}")

    def items(self) -> list[tuple[str, float]]:
        """``(name, value)`` of every limit."""
        return [(f.name, getattr(self, f.name)) for f in dataclasses.fields(self)]

    @classmethod
    def parse(cls, assignments: Iterable[str]) -> ConversionLimits:
        """Defaults with ``NAME=VALUE`` assignments applied (``serve --conversion-limit``).

        Raises:
            ValueError: An unknown name, or a value that is not a positive number.
        """
        types = {f.name: f.type for f in dataclasses.fields(cls)}
        changes: dict[str, float] = {}
        for assignment in assignments:
            name, _, raw = assignment.partition("=")
            name = name.strip()
            if name not in types:
                raise ValueError(
                    f"unknown conversion limit {name!r}; the limits: {', '.join(types)}"
                )
            try:
                changes[name] = float(raw) if types[name] == "float" else int(raw)
            except ValueError:
                raise ValueError(f"conversion limit {name}: {raw!r} is not a number") from None
        return cls(**changes)  # type: ignore[arg-type]
