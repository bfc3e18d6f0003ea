"""Small real Office files for tests: DOCX (written by hand), PPTX and XLSX (python-pptx and
openpyxl, which the ``office`` extra installs)."""

from __future__ import annotations

import io
import struct
import zipfile
import zlib

_CONTENT_TYPES = (
    '<?xml version="1.0" encoding="UTF-8"?>'
    '<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
    '<Default Extension="rels" '
    'ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
    '<Default Extension="xml" ContentType="application/xml"/>'
    '<Override PartName="/word/document.xml" ContentType="application/'
    'vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/></Types>'
)
_RELS = (
    '<?xml version="1.0" encoding="UTF-8"?>'
    '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
    '<Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/'
    'relationships/officeDocument" Target="word/document.xml"/></Relationships>'
)
_HEADING = '<w:pPr><w:pStyle w:val="Heading1"/></w:pPr>'


def docx(heading: str, *paragraphs: str) -> bytes:
    """A Word document: one Heading 1, then plain paragraphs."""
    runs = [(True, heading), *((False, text) for text in paragraphs)]
    body = "".join(
        f"<w:p>{_HEADING if is_heading else ''}<w:r><w:t>{text}</w:t></w:r></w:p>"
        for is_heading, text in runs
    )
    document = (
        '<?xml version="1.0" encoding="UTF-8" standalone="yes"?><w:document xmlns:w='
        '"http://schemas.openxmlformats.org/wordprocessingml/2006/main">'
        f"<w:body>{body}</w:body></w:document>"
    )
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("[Content_Types].xml", _CONTENT_TYPES)
        archive.writestr("_rels/.rels", _RELS)
        archive.writestr("word/document.xml", document)
    return buffer.getvalue()


def pptx(*slides: tuple[str, str]) -> bytes:
    """A presentation: one (title, body) slide each."""
    from pptx import Presentation

    presentation = Presentation()
    for title, text in slides:
        slide = presentation.slides.add_slide(presentation.slide_layouts[1])
        slide.shapes.title.text = title
        slide.placeholders[1].text = text
    buffer = io.BytesIO()
    presentation.save(buffer)
    return buffer.getvalue()


def xlsx(sheet: str, rows: list[list[object]]) -> bytes:
    """A workbook with one sheet of rows (the first row is the header)."""
    from openpyxl import Workbook

    workbook = Workbook()
    worksheet = workbook.active
    worksheet.title = sheet
    for row in rows:
        worksheet.append(row)
    buffer = io.BytesIO()
    workbook.save(buffer)
    return buffer.getvalue()


# --- hostile files ---------------------------------------------------------------------------
# Each is built here in well under a second: a repeated block is deflated once (after a full
# flush the compressor keeps no history, so every copy compresses to the same bytes) and the
# copies are concatenated into a hand-written ZIP, so a file can honestly expand to gigabytes.

_W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
_DOC_HEAD = f'<?xml version="1.0" encoding="UTF-8"?><w:document xmlns:w="{_W}"><w:body>'
_DOC_TAIL = "</w:body></w:document>"
MIB = 1024 * 1024


def deflated_repeat(head: bytes, block: bytes, times: int, tail: bytes) -> tuple[bytes, int, int]:
    """Raw deflate of ``head + block * times + tail``: (compressed, CRC-32, size)."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    start = compressor.compress(head) + compressor.flush(zlib.Z_FULL_FLUSH)
    middle = compressor.compress(block) + compressor.flush(zlib.Z_FULL_FLUSH)
    end = compressor.compress(tail) + compressor.flush()
    crc = zlib.crc32(head)
    for _ in range(times):
        crc = zlib.crc32(block, crc)
    crc = zlib.crc32(tail, crc)
    return start + middle * times + end, crc, len(head) + len(block) * times + len(tail)


def raw_zip(members: list[tuple[str, bytes, int, int]]) -> bytes:
    """A ZIP of already-deflated members: (name, raw deflate, CRC-32, uncompressed size)."""
    local, central = io.BytesIO(), io.BytesIO()
    for name, data, crc, size in members:
        encoded = name.encode()
        fields = (20, 0, 8, 0, 0x21, crc, len(data), size, len(encoded))
        offset = local.tell()
        local.write(struct.pack("<IHHHHHIIIHH", 0x04034B50, *fields, 0) + encoded + data)
        central.write(
            struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, *fields, 0, 0, 0, 0, 0, offset)
            + encoded
        )
    count, directory = len(members), central.getvalue()
    end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, count, count, len(directory), local.tell(), 0)
    return local.getvalue() + directory + end


def _deflated(text: str) -> tuple[bytes, int, int]:
    return deflated_repeat(text.encode(), b"", 0, b"")


def _docx_with(document: tuple[bytes, int, int], *extra: tuple[str, bytes, int, int]) -> bytes:
    return raw_zip(
        [
            ("[Content_Types].xml", *_deflated(_CONTENT_TYPES)),
            ("_rels/.rels", *_deflated(_RELS)),
            ("word/document.xml", *document),
            *extra,
        ]
    )


def zip_bomb_docx(expanded_mib: int = 1024) -> bytes:
    """A .docx of a few MB whose document.xml expands to ``expanded_mib`` MiB of paragraphs."""
    paragraph = b"<w:p><w:r><w:t>All work and no play makes a dull file.</w:t></w:r></w:p>"
    block = paragraph * (MIB // len(paragraph))
    body = deflated_repeat(_DOC_HEAD.encode(), block, expanded_mib, _DOC_TAIL.encode())
    return _docx_with(body)


def nul_docx(expanded_mib: int = 1024) -> bytes:
    """A .docx whose one text run holds ``expanded_mib`` MiB of NUL bytes."""
    head = (_DOC_HEAD + "<w:p><w:r><w:t>").encode()
    tail = ("</w:t></w:r></w:p>" + _DOC_TAIL).encode()
    return _docx_with(deflated_repeat(head, bytes(MIB), expanded_mib, tail))


def entity_docx(levels: int = 10) -> bytes:
    """A .docx whose document.xml declares nested entities ("billion laughs": 10**levels)."""
    entities = '<!ENTITY e0 "lol">' + "".join(
        f'<!ENTITY e{n} "{f"&e{n - 1};" * 10}">' for n in range(1, levels)
    )
    xml = (
        f'<?xml version="1.0"?><!DOCTYPE w:document [{entities}]><w:document xmlns:w="{_W}">'
        f"<w:body><w:p><w:r><w:t>&e{levels - 1};</w:t></w:r></w:p></w:body></w:document>"
    )
    return _docx_with(_deflated(xml))


def nested_docx(depth: int = 20_000) -> bytes:
    """A .docx whose paragraph sits under ``depth`` nested structured-document tags."""
    opening, closing = "<w:sdt><w:sdtContent>", "</w:sdtContent></w:sdt>"
    xml = (
        f"{_DOC_HEAD}{opening * depth}<w:p><w:r><w:t>deep</w:t></w:r></w:p>"
        f"{closing * depth}{_DOC_TAIL}"
    )
    return _docx_with(_deflated(xml))


_S = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"
_R = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
_XLSX_TYPES = (
    '<?xml version="1.0" encoding="UTF-8"?><Types xmlns="http://schemas.openxmlformats.org/'
    'package/2006/content-types"><Default Extension="rels" ContentType="application/'
    'vnd.openxmlformats-package.relationships+xml"/><Default Extension="xml" '
    'ContentType="application/xml"/></Types>'
)
_XLSX_RELS = (
    '<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="http://schemas.openxmlformats'
    '.org/package/2006/relationships"><Relationship Id="rId1" Type="http://schemas.'
    'openxmlformats.org/officeDocument/2006/relationships/officeDocument" '
    'Target="xl/workbook.xml"/></Relationships>'
)
_WORKBOOK = (
    f'<?xml version="1.0" encoding="UTF-8"?><workbook xmlns="{_S}" xmlns:r="{_R}"><sheets>'
    '<sheet name="Data" sheetId="1" r:id="rId1"/></sheets></workbook>'
)
_WORKBOOK_RELS = (
    '<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="http://schemas.openxmlformats'
    '.org/package/2006/relationships"><Relationship Id="rId1" Type="http://schemas.'
    'openxmlformats.org/officeDocument/2006/relationships/worksheet" '
    'Target="worksheets/sheet1.xml"/></Relationships>'
)


def _xlsx_with(sheet: tuple[bytes, int, int], strings: str = "<si><t>x</t></si>") -> bytes:
    shared = f'<?xml version="1.0" encoding="UTF-8"?><sst xmlns="{_S}">{strings}</sst>'
    return raw_zip(
        [
            ("[Content_Types].xml", *_deflated(_XLSX_TYPES)),
            ("_rels/.rels", *_deflated(_XLSX_RELS)),
            ("xl/workbook.xml", *_deflated(_WORKBOOK)),
            ("xl/_rels/workbook.xml.rels", *_deflated(_WORKBOOK_RELS)),
            ("xl/sharedStrings.xml", *_deflated(shared)),
            ("xl/worksheets/sheet1.xml", *sheet),
        ]
    )


def _sheet_head(dimension: str) -> str:
    return (
        f'<?xml version="1.0" encoding="UTF-8"?><worksheet xmlns="{_S}">'
        f'<dimension ref="{dimension}"/><sheetData>'
    )


def repetitive_xlsx(rows: int = 100_000, columns: int = 10) -> bytes:
    """A small .xlsx of ``rows`` x ``columns`` cells holding one shared string (the probe's
    166 KB sheet; ``rows`` a multiple of 1,000): rows without references compress alike."""
    row = "<row>" + '<c t="s"><v>0</v></c>' * columns + "</row>"
    last = chr(ord("A") + columns - 1)
    sheet = deflated_repeat(
        _sheet_head(f"A1:{last}{rows}").encode(),
        row.encode() * 1000,
        rows // 1000,
        b"</sheetData></worksheet>",
    )
    return _xlsx_with(sheet)


def billion_cell_xlsx() -> bytes:
    """A .xlsx declaring all 17 billion cells of a sheet, with values in two corners."""
    xml = (
        _sheet_head("A1:XFD1048576")
        + '<row r="1"><c r="A1" t="s"><v>0</v></c></row>'
        + '<row r="1048576"><c r="XFD1048576" t="s"><v>0</v></c></row>'
        + "</sheetData></worksheet>"
    )
    return _xlsx_with(_deflated(xml))


def wide_rows_xlsx(rows: int = 1000) -> bytes:
    """A .xlsx whose ``rows`` rows each reach column XFD: 16,384 cells laid out per row."""
    row = '<row><c t="s"><v>0</v></c><c r="XFD1" t="s"><v>0</v></c></row>'
    sheet = deflated_repeat(
        _sheet_head("A1:XFD1").encode(), row.encode(), rows, b"</sheetData></worksheet>"
    )
    return _xlsx_with(sheet)


def big_csv(rows: int = 3_000_000) -> bytes:
    """The probe's CSV: a header and ``rows`` one-character rows (about 2 bytes each)."""
    return b"a\n" + b"x\n" * rows


def dense_xlsx(rows: int = 99_000, columns: int = 10) -> bytes:
    """A .xlsx near the default limits that is accepted: ``rows`` x ``columns`` numbers (a
    multiple of 1,000 rows), inflating about 10 times, seconds of work to convert."""
    block = "".join(
        f'<row r="{r}">'
        + "".join(
            f'<c r="{chr(65 + c)}{r}"><v>{(r * 7919 + c * 104729) % 1000003}</v></c>'
            for c in range(columns)
        )
        + "</row>"
        for r in range(1, 1001)
    )
    sheet = deflated_repeat(
        _sheet_head(f"A1:{chr(64 + columns)}{rows}").encode(),
        block.encode(),
        rows // 1000,
        b"</sheetData></worksheet>",
    )
    return _xlsx_with(sheet)
