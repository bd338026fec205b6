"""What every `workflow/scripts/` adapter does around its one library call.

A Snakemake job's output belongs in its `log:` file, and a bad input must read as one line,
not a traceback: `logged_job()` sends stdout and stderr to the log, and turns an
`NnperfError` into `nnperf <job>: error: <line>` in the log *and* on the terminal (where
Snakemake otherwise prints only "Error in rule ...") with exit status 2. Any other exception
keeps its traceback in the log and gets one line on the terminal, with exit status 1.
`warn()` does the same for a problem the job carries on after (a corrupt checkpoint).

A measuring job (`nnperf.core.vocab.MEASURING_RULES`) holds the machine's measurement lock
for its body (`nnperf.core.machinelock`): one measurement at a time across Snakemake calls.

`failure_causes()` reads those lines back for the workflow's `onerror` handler, so a run
that ends with failed jobs ends with one line per job saying why, after Snakemake's blocks
of "Error in rule ..." that name only the log.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import traceback
from pathlib import Path
from typing import Iterator

from nnperf.core import machinelock
from nnperf.core.errors import NnperfError
from nnperf.core.vocab import MEASURING_RULES

# The one-line cause `logged_job` and the CLI (`nnperf <verb>: error: ...`) write.
CAUSE_LINE = re.compile(r"^nnperf [\w-]+: (error|failed): .+")


def failure_causes(log_dir: str | os.PathLike, since: float) -> list[tuple[str, str]]:
    """(log, cause) for every job log under `log_dir` written since `since` (a Unix time)
    whose job ended with an nnperf error line; the last such line of each log."""
    causes = []
    for log in sorted(Path(log_dir).rglob("*.log")):
        try:
            if log.stat().st_mtime < since:
                continue
            lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            continue
        found = [line for line in lines if CAUSE_LINE.match(line)]
        if found:
            causes.append((os.fspath(log), found[-1]))
    return causes


def warn(line: str) -> None:
    """A warning the user must see, as one line `warning: <line>`: on stderr (the job's log
    inside `logged_job`) and, when stderr goes to a log, on the terminal too, where
    Snakemake shows it among its own lines (a warning only in the log is never read)."""
    text = f"warning: {line}"
    print(text, file=sys.stderr, flush=True)
    if _LOGGED and sys.__stderr__ is not None:
        print(text, file=sys.__stderr__, flush=True)


# True while `logged_job` sends stderr to a log file (then `warn` writes to the terminal too).
_LOGGED = False


@contextlib.contextmanager
def logged_job(log_path: str | os.PathLike | None, job: str) -> Iterator[None]:
    """Run the body with its output in `log_path` (the terminal when None).

    Python's `sys.stdout`/`sys.stderr` are redirected, not descriptors 1 and 2: a timed
    run's worker processes write to a pipe their job relays into `sys.stderr`
    (`nnperf.engine.workerlog`), so their output lands here too."""
    terminal = sys.__stderr__
    if log_path is None:
        handle = None
    else:
        Path(log_path).parent.mkdir(parents=True, exist_ok=True)
        handle = open(log_path, "w", encoding="utf-8", buffering=1)
    global _LOGGED
    outer = _LOGGED
    try:
        with contextlib.ExitStack() as stack:
            if handle is not None:
                stack.enter_context(contextlib.redirect_stdout(handle))
                stack.enter_context(contextlib.redirect_stderr(handle))
                _LOGGED = True
            try:
                if job in MEASURING_RULES:
                    # Before the body: waiting for another study is not measuring.
                    stack.enter_context(machinelock.measuring(job))
                yield
            except NnperfError as exc:
                line = f"nnperf {job}: error: {exc}"
                print(line, file=sys.stderr)
                if handle is not None and terminal is not None:
                    print(line, file=terminal)
                raise SystemExit(2) from None
            except Exception as exc:
                traceback.print_exc()
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                where = f" (traceback in {log_path})" if handle is not None else ""
                line = f"nnperf {job}: failed: {type(exc).__name__}: {first}{where}"
                print(line, file=sys.stderr)
                if handle is not None and terminal is not None:
                    print(line, file=terminal)
                raise SystemExit(1) from None
    finally:
        _LOGGED = outer
        if handle is not None:
            handle.close()
