"""Rendering the written summary, and rule render_report's edge.

`render` fills a Jinja template of `nnperf/report/templates/` with a `Document`, its findings
worded (`wording.words.sentences`), and a function that turns a figure path into an image
source (a data URI for the self-contained HTML, a relative path for Markdown).
`render_files` (rule `render_report`, `nnperf render-report`) reads the results folders,
builds the document and writes both files.
"""

from __future__ import annotations

import base64
import dataclasses
import mimetypes
import os
import re
from pathlib import Path
from typing import Callable, Sequence

import pandas as pd

from nnperf.core import files
from nnperf.core.contract import ReportRequest
from nnperf.core.errors import NnperfError
from nnperf.core.wording import missing
from nnperf.report import results
from nnperf.report.document import build_document
from nnperf.report.outline import Document
from nnperf.report.wording.words import sentences


def display_cells(frame: pd.DataFrame) -> pd.DataFrame:
    """Every cell as text, missing values as a dash (not `nan`/`None`)."""
    return frame.astype(object).apply(
        lambda column: ["—" if missing(v) else str(v) for v in column]
    )


def table_html(frame: pd.DataFrame) -> str:
    import markupsafe

    html = display_cells(frame).to_html(index=False, escape=True, border=0, classes="data")
    return markupsafe.Markup(html)


def table_markdown(frame: pd.DataFrame) -> str:
    # A `|` inside a cell would end the cell in Markdown.
    cells = display_cells(frame).map(md_escape).replace({r"\|": r"\\|"}, regex=True)
    cells.columns = [str(c).replace("|", r"\|") for c in cells.columns]
    # disable_numparse: tabulate would reformat "14.0" as "14" and "0.0464" its own way.
    return cells.to_markdown(index=False, disable_numparse=True)


def md_escape(text: str) -> str:
    """Text safe in Markdown: `*` would start emphasis and `<` an HTML tag (kernel names
    such as `FillFunctor<float>`); underscores inside words are literal in CommonMark."""
    return re.sub(r"([*])", r"\\\1", str(text)).replace("<", "&lt;")


def worded(document: Document) -> Document:
    """`document` with every section's findings in words."""
    sections = [dataclasses.replace(s, findings=sentences(s.findings)) for s in document.sections]
    return dataclasses.replace(document, sections=sections)


def render(
    document: Document, html: bool, figure_src: Callable[[str], str], generated_from: str
) -> str:
    """The HTML (`html`) or Markdown summary; `figure_src(path)` gives each image's source."""
    import jinja2

    environment = jinja2.Environment(
        loader=jinja2.PackageLoader("nnperf.report", "templates"),
        autoescape=html,
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )
    template = environment.get_template("summary.html.j2" if html else "summary.md.j2")
    return template.render(
        doc=worded(document),
        generated_from=generated_from,
        table=table_html if html else table_markdown,
        figure_src=figure_src,
        md=md_escape,
    )


def data_uri(path: str | os.PathLike) -> str:
    """The file as a `data:` URI, so the HTML needs nothing beside itself."""
    mime = mimetypes.guess_type(os.fspath(path))[0] or "application/octet-stream"
    try:
        payload = Path(path).read_bytes()
    except FileNotFoundError:
        raise NnperfError(f"figure {os.fspath(path)!r}: file not found") from None
    return f"data:{mime};base64,{base64.b64encode(payload).decode('ascii')}"


def relative_link(path: str | os.PathLike, document: str | os.PathLike) -> str:
    """`path` relative to the folder of `document`, with forward slashes (Markdown links)."""
    relative = os.path.relpath(os.path.abspath(path), os.path.abspath(Path(document).parent))
    return Path(relative).as_posix()


def render_files(
    request: ReportRequest,
    local: results.FolderFiles,
    figures: Sequence[str | os.PathLike] | None,
    out_html: str | os.PathLike,
    out_md: str | os.PathLike,
    note_sources: Sequence[str] = (),
    rendered_at_unix: float | None = None,
) -> Document:
    """Write the summary of this machine's files and `request.extra_results` as HTML
    (self-contained: CSS inline, figures as data URIs) and Markdown (figures linked).

    `figures` None means every PNG under each folder's `figures/`; `note_sources` are the
    files `request.notes` came from; `rendered_at_unix` (now when None) ends the study's span.
    """
    folders = results.with_extra_results(local, request.extra_results)
    loaded = results.load(folders)
    shown = results.figures(folders) if figures is None else [os.fspath(f) for f in figures]
    if note_sources:
        loaded.sources["notes"] = list(note_sources)
    document = build_document(
        loaded,
        title=request.title,
        description=request.description,
        cv_threshold=request.cv_threshold,
        figures=shown,
        notes=request.notes,
        rendered_at_unix=rendered_at_unix,
    )
    origin = "the files listed under Sources in each section"
    html = render(document, True, data_uri, origin)
    markdown = render(document, False, lambda path: relative_link(path, out_md), origin)
    for path, text in ((out_html, html), (out_md, markdown)):
        with files.atomic_path(path) as tmp:
            tmp.write_text(text, encoding="utf-8")
    print(
        f"render-report: {len(document.sections)} sections, {len(shown)} figures, "
        f"{len(document.machines)} machine(s) -> {os.fspath(out_html)}, {os.fspath(out_md)}"
    )
    return worded(document)
