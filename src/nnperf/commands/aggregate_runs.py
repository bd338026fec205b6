"""`nnperf aggregate-runs`: run JSONs -> runs.csv (one row per rep) and summary.csv.

Also checks from the recorded start/end times that no two reps on the same machine ran at
the same time: overlaps are flagged in both tables (`overlap`), reported on stderr, and with
--fail-on-overlap make the command fail.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from nnperf import stats
from nnperf.errors import NnperfError
from nnperf.files import read_json, write_csv


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "aggregate-runs",
        help="tabulate timed runs: runs.csv and summary.csv",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "runs",
        nargs="+",
        metavar="RUN_JSON",
        help="run JSON files written by `nnperf run` (or folders holding them)",
    )
    parser.add_argument("--out-runs", required=True, help="runs.csv to write")
    parser.add_argument("--out-summary", required=True, help="summary.csv to write")
    parser.add_argument(
        "--cv-threshold",
        type=float,
        default=stats.DEFAULT_CV_THRESHOLD,
        help="flag configurations whose throughput CV across reps exceeds this "
        "(config report.cv_threshold)",
    )
    parser.add_argument(
        "--fail-on-overlap",
        action="store_true",
        help="exit with an error when two reps on one machine overlapped in time",
    )
    parser.set_defaults(func=run)


def _run_files(entries: list[str]) -> list[Path]:
    files = []
    for entry in entries:
        path = Path(entry)
        if path.is_dir():
            # Per-step CSVs sit beside the JSONs; only rep*.json are run documents.
            files.extend(sorted(path.rglob("rep*.json")))
        elif path.is_file():
            files.append(path)
        else:
            raise NnperfError(f"{entry}: file not found; allowed: run JSON files or folders")
    return files


def run(args) -> int:
    from nnperf import aggregate  # pandas: imported only when this verb runs

    if not 0 < args.cv_threshold:
        raise NnperfError(f"--cv-threshold {args.cv_threshold!r} is not allowed; allowed: > 0")
    documents = []
    for path in _run_files(args.runs):
        document = read_json(path)
        if document.get("kind", "timed_run") != "timed_run":
            raise NnperfError(
                f"{path}: kind {document.get('kind')!r} is not a timed run; "
                "allowed: files written by `nnperf run`"
            )
        documents.append((str(path), document))
    runs = aggregate.runs_table(documents)
    summary = aggregate.summary_table(runs, args.cv_threshold)
    write_csv(args.out_runs, runs)
    write_csv(args.out_summary, summary)
    n_overlap = int(runs["overlap"].sum())
    print(
        f"{len(runs)} reps, {len(summary)} configurations, "
        f"{int((runs['status'] == 'oom').sum())} out of memory, {n_overlap} overlapping reps"
    )
    if n_overlap:
        try:
            aggregate.check_no_overlap(runs)
        except NnperfError as exc:
            if args.fail_on_overlap:
                raise
            print(f"warning: {exc}", file=sys.stderr)
    return 0
