"""Office files are ZIP packages: check what they would expand to before anything reads them.

A 2 MB ``.docx`` can hold gigabytes of XML (a *zip bomb*); its central directory says so
before a byte is inflated. :func:`open_office_package` reads that directory and refuses a
package with too many members, a member or a total larger than the limits, or a member that
inflates more than ``zip_ratio`` times. The sizes it checks are the ones every reader obeys:
Python's :mod:`zipfile` (which mammoth, python-pptx and the spreadsheet reader all use)
stops a member at its declared size and fails its checksum if more data follows.

It also refuses XML parts with a document type declaration: entity declarations are how a
few kilobytes of XML expand to gigabytes ("billion laughs"), and Open Packaging Conventions
forbid DTDs in a package, so no genuine Office file has one. And it refuses XML nested more
than ``xml_depth`` (256, libxml2's own default) elements deep: markitdown's DOCX path
(BeautifulSoup) spends time quadratic in the depth, 30 s on a 900 KB part 20,000 deep. That
check parses each XML part once with expat, about 50 ms for a typical document.
"""

from __future__ import annotations

import io
import xml.parsers.expat
import zipfile

from agentic_retrieval.errors import ConversionLimitError, LoaderError
from agentic_retrieval.sources.local.conversion_limits import (
    MIB,
    RATIO_CHECK_FROM_BYTES,
    ConversionLimits,
)
from agentic_retrieval.sources.local.spreadsheets import out_of_memory

_XML_PARTS = (".xml", ".rels", ".vml")
_CHUNK = 1 << 16


def open_office_package(
    data: bytes, kind: str, limits: ConversionLimits, *, nesting: bool = True
) -> zipfile.ZipFile:
    """The package of an Office file, once its members are known to be within ``limits``.

    Args:
        data: The file's bytes.
        kind: Its extension (``.docx``...), for messages.
        limits: The ``zip_*`` limits (and ``xml_depth``) to check.
        nesting: Also parse every XML part through and refuse nesting deeper than
            ``xml_depth`` (for readers that recurse; a streaming reader can skip it).

    Raises:
        ConversionLimitError: Too many members, a member or the total too large, a member
            inflating more than ``zip_ratio`` times, or XML nested too deeply.
        LoaderError: Not a ZIP package, or an XML part declaring a DTD or not well-formed.
    """
    try:
        package = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError) as exc:
        raise LoaderError(f"not a valid {kind} file (not an Office ZIP package)") from exc
    members = package.infolist()
    if len(members) > limits.zip_members:
        raise ConversionLimitError(
            f"the {kind} package has {len(members):,} members (limit zip_members="
            f"{limits.zip_members})",
            "zip_members",
        )
    total = 0
    for member in members:
        _check_member(member, kind, limits)
        total += member.file_size
        if total > limits.zip_total_mb * MIB:
            raise ConversionLimitError(
                f"the {kind} package expands to more than {limits.zip_total_mb} MiB "
                f"(limit zip_total_mb={limits.zip_total_mb}); a zip bomb?",
                "zip_total_mb",
            )
    for member in members:
        if member.filename.lower().endswith(_XML_PARTS) and not member.is_dir():
            _check_xml(package, member, kind, limits.xml_depth if nesting else None)
    return package


def _check_member(member: zipfile.ZipInfo, kind: str, limits: ConversionLimits) -> None:
    size = member.file_size
    if size > limits.zip_member_mb * MIB:
        raise ConversionLimitError(
            f"the {kind} member {member.filename!r} expands to {size / MIB:,.0f} MiB (limit "
            f"zip_member_mb={limits.zip_member_mb}); a zip bomb?",
            "zip_member_mb",
        )
    ratio = size / max(member.compress_size, 1)
    if size >= RATIO_CHECK_FROM_BYTES and ratio > limits.zip_ratio:
        raise ConversionLimitError(
            f"the {kind} member {member.filename!r} inflates {ratio:,.0f} times, from "
            f"{member.compress_size:,} to {size:,} bytes (limit zip_ratio={limits.zip_ratio}); "
            "a zip bomb?",
            "zip_ratio",
        )


def _check_xml(
    package: zipfile.ZipFile, member: zipfile.ZipInfo, kind: str, max_depth: int | None
) -> None:
    """Refuse a DOCTYPE in ``member``'s prolog and, with ``max_depth``, deeper nesting.

    Without ``max_depth`` only the prolog is read (up to the root element).
    """
    seen = {"root": False, "doctype": False, "depth": 0}

    def doctype(*_: object) -> None:
        seen["doctype"] = True

    def root(*_: object) -> None:
        seen["root"] = True
        parser.StartElementHandler = None  # the rest of this chunk costs nothing more

    def start(*_: object) -> None:
        seen["root"] = True
        seen["depth"] += 1
        if max_depth is not None and seen["depth"] > max_depth:
            raise ConversionLimitError(
                f"the {kind} part {member.filename!r} nests elements more than {max_depth} "
                f"deep (limit xml_depth={max_depth})",
                "xml_depth",
            )

    def end(*_: object) -> None:
        seen["depth"] -= 1

    parser = xml.parsers.expat.ParserCreate()
    parser.StartDoctypeDeclHandler = doctype
    if max_depth is None:
        parser.StartElementHandler = root
    else:
        parser.StartElementHandler = start
        parser.EndElementHandler = end
    try:
        with package.open(member) as stream:
            chunk = stream.read(_CHUNK)
            while chunk and not seen["doctype"] and (max_depth is not None or not seen["root"]):
                parser.Parse(chunk, False)
                chunk = stream.read(_CHUNK)
    except (RuntimeError, NotImplementedError) as exc:  # zipfile: encrypted, or AES/unknown
        raise LoaderError(
            f"unreadable {kind} file: the part {member.filename!r} is encrypted or compressed "
            "in a way this reader does not support"
        ) from exc
    except (xml.parsers.expat.ExpatError, zipfile.BadZipFile, EOFError, OSError) as exc:
        if isinstance(exc, xml.parsers.expat.ExpatError) and out_of_memory(exc):
            raise MemoryError from exc  # a limit of the process, not a fault of the file
        if not seen["doctype"]:
            raise LoaderError(
                f"unreadable {kind} file: the part {member.filename!r} is not well-formed XML"
            ) from exc
    if seen["doctype"]:
        raise LoaderError(
            f"the {kind} part {member.filename!r} declares a DTD; Office files never do, and "
            "its entities could expand without bound (an XML bomb)"
        )
