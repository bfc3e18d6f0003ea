"""Small real Office files for tests: DOCX (written by hand), PPTX and XLSX (python-pptx and
openpyxl, which the ``office`` extra installs)."""

from __future__ import annotations

import io
import zipfile

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
