"""The written summary: built from a study's tables (`build_document`, answer first, each
figure in the section its path names), rendered from `templates/` (`render`: figures as data
URIs in the self-contained HTML, relative paths in Markdown) and written (`render_files`).
"""

from __future__ import annotations

import base64
import mimetypes
import os
import re
import time
from pathlib import Path
from typing import Callable, Sequence

import jinja2
import pandas as pd
from markupsafe import Markup

from nnperf.core import files
from nnperf.core.contract import ReportRequest
from nnperf.core.errors import NnperfError
from nnperf.core.wording import missing
from nnperf.report import results
from nnperf.report.outline import Document, Figure, FigureGroup, Page, section
from nnperf.report.sections import accuracy, breakdown, ceilings, complexity, environment
from nnperf.report.sections import headline, input_pipeline, kernels, machines_compared
from nnperf.report.sections import measurement, notes, operators, roofline
from nnperf.report.sections import speedups, throughput
from nnperf.report.sections.kernels import DEFAULT_TOP_KERNELS
from nnperf.report.sections.key_findings import key_findings
from nnperf.report.wording.words import sentences

# Every section builder, in the order the summary shows them; each returns its Section, or
# None where the study has nothing for it. Key findings and Notes show even when empty.
SECTIONS = (
    headline.build,
    lambda page: section("key-findings", "Key findings", findings=key_findings(page)),
    throughput.build,
    speedups.build,
    breakdown.build,
    roofline.build,
    input_pipeline.build,
    ceilings.build,
    kernels.build,
    complexity.build,
    accuracy.build,
    operators.build,
    machines_compared.build,
    # The figures no other section claims (`figure_section`).
    lambda page: section("figures", "More figures", figures=page.figures_of("figures")),
    measurement.build,
    notes.build,
    environment.build,
)
SHOWN = ("key-findings", "notes")


# Where a figure goes: the section of the first keyword its path holds, else More figures.
FIGURE_SECTIONS = {
    "accuracy": ("figures/accuracy/",),
    "operators": ("figures/operators/", "figures/memory/"),
    "machines": ("machines",),
    "speedups": ("speedup",),
    "breakdown": ("breakdown", "phase"),
    "ceilings": ("sweep", "ceiling"),
    "roofline": ("roofline", "flops"),
    "kernels": ("kernel",),
    **{name: (name,) for name in ("throughput", "complexity", "environment")},
}


def figure_section(path: str) -> str:
    lowered = path.replace("\\", "/").lower()
    found = (name for name, words in FIGURE_SECTIONS.items() for word in words if word in lowered)
    return next(found, "figures")


# A section shows at most this many figures of one kind inline; more are folded.
FOLD_AFTER = 6


def fold_figures(figures: list[Figure], limit: int = FOLD_AFTER) -> tuple[list, list]:
    """(shown, folded groups): kinds (the folder below `figures/`) with more than `limit`
    figures are folded whole."""
    kinds: dict[str, list[Figure]] = {}
    for figure in figures:
        parts = figure.path.replace("\\", "/").split("/")
        deep = "figures" in parts and parts.index("figures") + 2 < len(parts)
        kind = parts[parts.index("figures") + 1] if deep else "figures"
        kinds.setdefault(kind, []).append(figure)
    shown = [f for group in kinds.values() if len(group) <= limit for f in group]
    folded = [
        FigureGroup(f"{len(group)} {kind.replace('_', ' ')} figures", group)
        for kind, group in kinds.items()
        if len(group) > limit
    ]
    return shown, folded


def build_document(
    tables: results.ResultSet, request: ReportRequest, figures: Sequence[str], rendered_at: float
) -> Document:
    """Every section of the summary, the `figures` (paths) in their sections; `rendered_at`
    (Unix seconds) ends the study's span."""
    frames = [
        f for f in (tables.summary, tables.environment, tables.roofline_points) if f is not None
    ]
    page = Page(
        tables=tables,
        machines=sorted({m for f in frames if "machine" in f for m in f["machine"].dropna()}),
        figures={},
        notes=list(request.notes),
        cv_threshold=request.cv_threshold,
        rendered_at=rendered_at,
        top_n_kernels=DEFAULT_TOP_KERNELS,
    )
    for path in figures:
        # A figure's caption is its path below `figures/`, which names its experiment.
        parts = path.replace("\\", "/").split("/")
        parts = parts[parts.index("figures") + 1 :] if "figures" in parts else parts
        caption = " / ".join(parts).removesuffix(".png")
        page.figures.setdefault(figure_section(path), []).append(Figure(path, caption))
    sections = [section for build in SECTIONS if (section := build(page)) is not None]
    for section in sections:
        section.figures, section.folded = fold_figures(section.figures)
        section.findings = sentences(section.findings)
    shown = [
        s for s in sections if s.tables or s.figures or s.folded or s.findings or s.id in SHOWN
    ]
    return Document(request.title, request.description, shown, page.machines)


def display_cells(frame: pd.DataFrame) -> pd.DataFrame:
    """Every cell as text, missing values as a dash (not `nan`/`None`)."""
    return frame.astype(object).map(lambda value: "—" if missing(value) else str(value))


def table_html(frame: pd.DataFrame) -> str:
    return Markup(display_cells(frame).to_html(index=False, escape=True, border=0, classes="data"))


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


# Block tags take no line of their own in the page; it ends with a newline as the template does.
TEMPLATE_OPTIONS = {"trim_blocks": True, "lstrip_blocks": True, "keep_trailing_newline": True}


def render(document: Document, html: bool, figure_src: Callable[[str], str]) -> str:
    """The HTML (`html`) or Markdown summary; `figure_src(path)` gives each image's source."""
    loader = jinja2.PackageLoader("nnperf.report", "templates")
    options = {"autoescape": html, "undefined": jinja2.StrictUndefined, **TEMPLATE_OPTIONS}
    environment = jinja2.Environment(loader=loader, **options)
    return environment.get_template("summary.html.j2" if html else "summary.md.j2").render(
        doc=document,
        generated_from="the files listed under Sources in each section",
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
    now = time.time() if rendered_at_unix is None else rendered_at_unix
    document = build_document(loaded, request, shown, now)
    # Markdown links: relative to the page's folder, with forward slashes.
    folder = os.path.abspath(Path(out_md).parent)
    relative = lambda path: Path(os.path.relpath(os.path.abspath(path), folder)).as_posix()
    pages = {out_html: render(document, True, data_uri), out_md: render(document, False, relative)}
    for path, text in pages.items():
        with files.atomic_path(path) as tmp:
            tmp.write_text(text, encoding="utf-8")
    print(
        f"render-report: {len(document.sections)} sections, {len(shown)} figures, "
        f"{len(document.machines)} machine(s) -> {os.fspath(out_html)}, {os.fspath(out_md)}"
    )
    return document
