"""`nnperf render-report`: the written summary of a study, as HTML and Markdown.

Reads the tables, JSONs and figures the pipeline wrote — this machine's (explicit files, or
a `--results` folder) and any `--extra-results` folders from other machines — and writes
`reports/summary.html` (self-contained: CSS inline, figures embedded as data URIs, nothing
fetched from anywhere) and `reports/summary.md` (figures linked by relative path). What the
summary says is computed in `nnperf.report`; this module only reads and writes files.
"""

from __future__ import annotations

import argparse
import base64
import json
import mimetypes
import os
from pathlib import Path

from nnperf import files, report, results
from nnperf.errors import NnperfError

DEFAULT_RESULTS = "results"
DEFAULT_CV_THRESHOLD = 0.05  # config report.cv_threshold


def add_input_flags(parser: argparse.ArgumentParser) -> None:
    """Flags naming this machine's results (shared with `compare-machines`)."""
    parser.add_argument(
        "--results",
        default=None,
        metavar="DIR",
        help="this machine's results folder; every file of the pipeline's layout found in it "
        "is read (default: results, unless files are named with the flags below)",
    )
    for flag, what in (
        ("--runs", "runs.csv"),
        ("--summary", "summary.csv"),
        ("--kernels", "kernels.csv"),
        ("--roofline-points", "roofline_points.csv"),
        ("--environment", "environment.csv"),
    ):
        parser.add_argument(
            flag,
            default=None,
            metavar="CSV",
            help=f"{what} of this machine (overrides the one in --results)",
        )
    parser.add_argument(
        "--extra-results",
        nargs="*",
        default=[],
        metavar="DIR",
        help="results folders of other machines to compare side by side "
        "(config report.extra_results); each holds tables/, complexity/, ceilings/",
    )


def local_folder(args: argparse.Namespace) -> results.FolderFiles:
    """This machine's files: discovered in --results, then overridden by explicit flags."""
    explicit = {name: getattr(args, name, None) for name in results.TABLE_NAMES}
    named_any = any(explicit.values()) or any(
        getattr(args, name, None) for name in ("complexity", "ceilings", "figures")
    )
    folder_name = args.results or (None if named_any else DEFAULT_RESULTS)
    if folder_name is not None:
        folder = results.discover(folder_name)
    else:
        folder = results.FolderFiles(
            results_dir=DEFAULT_RESULTS,
            tables=dict.fromkeys(results.TABLE_NAMES),
            complexity=[],
            ceilings=[],
            run_jsons=[],
        )
    for name, path in explicit.items():
        if path is not None:
            folder.tables[name] = _existing(path, f"--{name.replace('_', '-')}")
    folder.complexity += [
        _existing(p, "--complexity") for p in getattr(args, "complexity", None) or []
    ]
    folder.ceilings += [_existing(p, "--ceilings") for p in getattr(args, "ceilings", None) or []]
    folder.complexity = list(dict.fromkeys(folder.complexity))
    folder.ceilings = list(dict.fromkeys(folder.ceilings))
    return folder


def extra_folders(args: argparse.Namespace) -> list[results.FolderFiles]:
    folders = []
    for path in args.extra_results:
        if not Path(path).is_dir():
            raise NnperfError(
                f"report.extra_results entry {path!r} is not a folder; give the results/ "
                "folder another machine's run wrote"
            )
        folders.append(results.discover(path))
    return folders


def _existing(path: str | os.PathLike, flag: str) -> Path:
    if not Path(path).is_file():
        raise NnperfError(f"{flag} {os.fspath(path)!r}: file not found")
    return Path(path)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "render-report",
        help="Write the summary (HTML, self-contained, and Markdown) of the results.",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_input_flags(parser)
    parser.add_argument(
        "--complexity",
        nargs="*",
        default=[],
        metavar="JSON",
        help="complexity JSONs (results/complexity/{model}.json)",
    )
    parser.add_argument(
        "--ceilings",
        nargs="*",
        default=[],
        metavar="JSON",
        help="ceilings JSONs (results/ceilings/{device}.json)",
    )
    parser.add_argument(
        "--figures",
        nargs="*",
        default=None,
        metavar="PNG",
        help="figures to include, placed in sections by their path "
        "(default: every PNG under the results folders' figures/)",
    )
    parser.add_argument(
        "--note",
        action="append",
        default=[],
        metavar="TEXT",
        help="a note for the Notes section (what was skipped and why); repeatable",
    )
    parser.add_argument(
        "--notes-file",
        default=None,
        metavar="FILE",
        help="more notes: a JSON list of strings, or one note per line",
    )
    parser.add_argument(
        "--cv-threshold",
        type=float,
        default=DEFAULT_CV_THRESHOLD,
        metavar="CV",
        help="coefficient of variation of throughput above which a "
        "configuration is flagged (config report.cv_threshold; "
        f"default {DEFAULT_CV_THRESHOLD})",
    )
    parser.add_argument(
        "--top-kernels",
        type=int,
        default=report.DEFAULT_TOP_KERNELS,
        metavar="N",
        help="kernels listed per configuration (default %(default)s)",
    )
    parser.add_argument(
        "--title",
        default="nnperf study",
        help="report title (config study.name; default %(default)r)",
    )
    parser.add_argument(
        "--description",
        default="Training throughput and its limits.",
        help="one paragraph under the title (config study.description)",
    )
    parser.add_argument(
        "--out-html",
        default="reports/summary.html",
        metavar="HTML",
        help="where to write the HTML summary (default %(default)s)",
    )
    parser.add_argument(
        "--out-md",
        default="reports/summary.md",
        metavar="MD",
        help="where to write the Markdown summary (default %(default)s)",
    )
    parser.set_defaults(func=run)


def read_notes(path: str | None) -> list[str]:
    if path is None:
        return []
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise NnperfError(f"--notes-file {path!r}: file not found") from None
    if text.lstrip().startswith("["):
        try:
            notes = json.loads(text)
        except json.JSONDecodeError as exc:
            raise NnperfError(
                f"--notes-file {path!r}: not valid JSON ({exc.msg} at line "
                f"{exc.lineno}); allowed: a JSON list of strings or plain lines"
            ) from None
        if not all(isinstance(n, str) for n in notes):
            raise NnperfError(f"--notes-file {path!r}: the JSON list must hold strings only")
        return notes
    return [line.strip() for line in text.splitlines() if line.strip()]


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


def run(args: argparse.Namespace) -> int:
    if args.cv_threshold <= 0:
        raise NnperfError(
            f"--cv-threshold {args.cv_threshold}: must be > 0 " "(config report.cv_threshold)"
        )
    if args.top_kernels < 1:
        raise NnperfError(f"--top-kernels {args.top_kernels}: must be >= 1")
    folders = [local_folder(args), *extra_folders(args)]
    loaded = results.load(folders)
    if args.figures is None:
        figures = [
            os.fspath(p)
            for f in folders
            for p in sorted(Path(f.results_dir, "figures").glob("**/*.png"))
        ]
    else:
        figures = [os.fspath(_existing(p, "--figures")) for p in args.figures]
    notes = list(args.note) + read_notes(args.notes_file)
    sources = dict(loaded.sources)
    if args.notes_file:
        sources["notes"] = [args.notes_file]
    inputs = report.ReportInputs(
        summary=loaded.summary,
        runs=loaded.runs,
        kernels=loaded.kernels,
        roofline_points=loaded.roofline_points,
        environment=loaded.environment,
        complexity=loaded.complexity,
        ceilings=loaded.ceilings,
        figures=figures,
        notes=notes,
        sources=sources,
    )
    document = report.build_document(
        inputs,
        title=args.title,
        description=args.description,
        cv_threshold=args.cv_threshold,
        top_n_kernels=args.top_kernels,
    )
    origin = "the files listed under Sources in each section"
    html = report.render_html(document, data_uri, origin)
    markdown = report.render_markdown(
        document, lambda path: relative_link(path, args.out_md), origin
    )
    for path, text in ((args.out_html, html), (args.out_md, markdown)):
        with files.atomic_path(path) as tmp:
            tmp.write_text(text, encoding="utf-8")
    print(
        f"render-report: {len(document.sections)} sections, {len(figures)} figures, "
        f"{len(document.machines)} machine(s) -> {args.out_html}, {args.out_md}"
    )
    return 0
