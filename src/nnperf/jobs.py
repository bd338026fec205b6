"""What every `workflow/scripts/` adapter does around its one library call.

A Snakemake job's output belongs in its `log:` file, and a bad input must read as one line,
not a traceback: `logged_job()` sends stdout and stderr to the log, and turns an
`NnperfError` into `nnperf <job>: error: <line>` in the log *and* on the terminal (where
Snakemake otherwise prints only "Error in rule ...") with exit status 2. Any other exception
keeps its traceback in the log and gets one line on the terminal, with exit status 1.
"""

from __future__ import annotations

import contextlib
import os
import sys
import traceback
from pathlib import Path
from typing import Iterator

from nnperf.errors import NnperfError


@contextlib.contextmanager
def logged_job(log_path: str | os.PathLike | None, job: str) -> Iterator[None]:
    """Run the body with its output in `log_path` (the terminal when None)."""
    terminal = sys.__stderr__
    if log_path is None:
        handle = None
    else:
        Path(log_path).parent.mkdir(parents=True, exist_ok=True)
        handle = open(log_path, "w", encoding="utf-8", buffering=1)
    try:
        with contextlib.ExitStack() as stack:
            if handle is not None:
                stack.enter_context(contextlib.redirect_stdout(handle))
                stack.enter_context(contextlib.redirect_stderr(handle))
            try:
                yield
            except NnperfError as exc:
                line = f"nnperf {job}: error: {exc}"
                print(line, file=sys.stderr)
                if handle is not None and terminal is not None:
                    print(line, file=terminal)
                raise SystemExit(2) from None
            except Exception as exc:
                traceback.print_exc()
                if handle is not None and terminal is not None:
                    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                    print(
                        f"nnperf {job}: failed: {type(exc).__name__}: {first} "
                        f"(traceback in {log_path})",
                        file=terminal,
                    )
                raise SystemExit(1) from None
    finally:
        if handle is not None:
            handle.close()
