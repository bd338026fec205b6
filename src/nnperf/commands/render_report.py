"""`nnperf render-report`: the written summary of a study, as HTML and Markdown.

Reads this machine's results (a `--results` folder, or the files named) and any
`--extra-results` folders from other machines, and writes the self-contained HTML summary and
the Markdown one (`nnperf.report.render.render_files`, the same as rule `render_report`).
The flags mirror config `study:` and `report:`; their defaults are those of
`nnperf.core.contract.ReportRequest`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from nnperf.core import layout, vocab
from nnperf.core.contract import ReportRequest, from_dict
from nnperf.core.errors import NnperfError
from nnperf.report import results
from nnperf.report import render


def add_input_flags(parser: argparse.ArgumentParser) -> None:
    """Flags naming the results to read (shared with `compare-machines`)."""
    parser.add_argument(
        "--results",
        metavar="DIR",
        help=f"this machine's results (default: {results.RESULTS_DIR}/, unless files are named)",
    )
    for name in results.TABLE_NAMES:
        parser.add_argument(
            "--" + name.replace("_", "-"), metavar="CSV", help=f"{name}.csv of this machine"
        )
    parser.add_argument(
        "--dataset",
        choices=vocab.DATASETS,
        help="the study to read when the results folder holds several (default: its only one)",
    )
    parser.add_argument(
        "--extra-results",
        nargs="+",
        metavar="DIR",
        help="results folders of other machines to set side by side (report.extra_results), "
        "read for the same dataset",
    )


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "render-report",
        help="Write the summary (HTML and Markdown) of the results.",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_input_flags(parser)
    add = parser.add_argument
    add(
        "--complexity",
        nargs="+",
        default=(),
        metavar="JSON",
        help="complexity JSONs of this machine",
    )
    add("--ceilings", nargs="+", default=(), metavar="JSON", help="ceilings JSONs of this machine")
    add(
        "--run-jsons",
        nargs="+",
        default=(),
        metavar="JSON",
        help="run JSONs of this machine: when each timed job ran, for the measurement-cost "
        "section (found under --results/runs/ by themselves)",
    )
    add("--figures", nargs="*", metavar="PNG", help="figures (default: every PNG in figures/)")
    add("--note", action="append", default=[], metavar="TEXT", help="a note; repeatable")
    add("--notes-file", metavar="FILE", help="notes: a JSON list of strings, or one per line")
    add(
        "--cv-threshold",
        type=float,
        metavar="CV",
        help=f"flag a throughput CV above this (report.cv_threshold; {ReportRequest.cv_threshold})",
    )
    add("--title", help=f"report title (study.name; default {ReportRequest.title!r})")
    add("--description", help="one paragraph under the title (study.description)")
    add("--out-html", help="HTML to write (default: reports/{dataset}/summary.html)")
    add("--out-md", help="Markdown to write (default: reports/{dataset}/summary.md)")
    parser.set_defaults(func=run)


def local_files(args: argparse.Namespace, named: tuple = ()) -> results.FolderFiles:
    """This machine's files: the --results folder (or results/ when nothing is named), then
    the files named by flags."""
    tables = {name: getattr(args, name) for name in results.TABLE_NAMES}
    named_any = any(tables.values()) or any(named)
    folder = args.results or (None if named_any else results.RESULTS_DIR)
    return results.local_files(folder, tables, *named, dataset=args.dataset)


# ReportRequest fields that are flags of the same name.
REQUEST_FLAGS = ("title", "description", "cv_threshold", "extra_results", "dataset")


def request(args: argparse.Namespace, notes: list[str] = ()) -> ReportRequest:
    """The ReportRequest of the flags given; the others keep the contract's defaults."""
    given = {name: getattr(args, name, None) for name in REQUEST_FLAGS}
    given["notes"] = list(notes) or None
    return from_dict(ReportRequest, {k: v for k, v in given.items() if v is not None})


def read_notes(path: str | None) -> list[str]:
    if path is None:
        return []
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise NnperfError(f"--notes-file {path!r}: file not found") from None
    if not text.lstrip().startswith("["):
        return [line.strip() for line in text.splitlines() if line.strip()]
    try:
        notes = json.loads(text)
    except json.JSONDecodeError as exc:
        raise NnperfError(
            f"--notes-file {path!r}: not valid JSON ({exc.msg} at line {exc.lineno}); "
            "allowed: a JSON list of strings or plain lines"
        ) from None
    if not all(isinstance(n, str) for n in notes):
        raise NnperfError(f"--notes-file {path!r}: the JSON list must hold strings only")
    return notes


def default_output(kind: str, dataset: str | None) -> str:
    """Where the workflow puts the study's summary; reports/summary.* when only files were
    named and nothing says which dataset they are of."""
    if dataset is None:
        return layout.path(kind, dataset="_").replace("/_/", "/")
    return layout.path(kind, dataset=dataset)


def run(args: argparse.Namespace) -> int:
    local = local_files(args, (args.complexity, args.ceilings, args.run_jsons))
    notes = list(args.note) + read_notes(args.notes_file)
    render.render_files(
        request(args, notes),
        local,
        args.figures,
        args.out_html or default_output("summary_html", local.dataset),
        args.out_md or default_output("summary_md", local.dataset),
        note_sources=[args.notes_file] if args.notes_file else [],
    )
    return 0
