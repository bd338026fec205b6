"""Atomic, versioned reads and writes of the pipeline's JSON and CSV files.

Every output is written to a temporary file in the same directory and renamed into place, so
an interrupted job never leaves a file that looks finished (Snakemake would otherwise trust
it on the next run). JSON documents carry `schema_version` so readers can refuse formats they
do not understand.

Every CSV table is written by `write_csv` with a sidecar, `<table>.meta`, holding its row
count and SHA-256, and read by `read_table` (or checked by `check_table`), which refuses a
table that no longer matches it: a table cut short at a row boundary still parses, and would
otherwise make a report that is wrong without a word. A table without a sidecar is refused
inside a results folder (`results/tables/...`, `results/runs/...`: nnperf wrote it, so its
sidecar was lost or it predates them; see `in_results_folder`) and read as it is elsewhere: the committed examples in
reports/examples/ are tables a person opens with any tool, and git already holds their hashes.
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import io
import json
import math
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterable, Iterator

SCHEMA_VERSION = 1


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path next to `path`; rename it onto `path` only on success."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        # mkstemp creates 0600 files; results must be readable like any other file the
        # user writes (shared cluster folders), so apply the umask as open() would.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def _json_default(value: Any) -> Any:
    """Serialise numpy/torch scalars and paths that json does not know."""
    if hasattr(value, "item"):
        return value.item()
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    raise TypeError(f"cannot serialise {type(value).__name__} to JSON")


def _finite_or_none(value: Any) -> Any:
    """JSON has no NaN/Infinity; strict readers reject them, so they become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite_or_none(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_or_none(v) for v in value]
    return value


def write_json(path: str | os.PathLike, document: dict) -> None:
    """Write `document` with `schema_version` first, atomically."""
    body = {"schema_version": SCHEMA_VERSION, **document}
    text = json.dumps(_finite_or_none(body), indent=2, sort_keys=False, default=_json_default)
    with atomic_path(path) as tmp:
        tmp.write_text(text + "\n", encoding="utf-8")


def load_json(path: str | os.PathLike, what: str = "file") -> Any:
    """Parse a JSON file, with one-line errors naming it (`what` says what was expected)."""
    from nnperf.core.errors import NnperfError

    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise NnperfError(f"{path}: {what} not found") from None
    except json.JSONDecodeError as exc:
        raise NnperfError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None


def read_json(path: str | os.PathLike) -> dict:
    """Read a document written by `write_json`, refusing unknown schema versions."""
    from nnperf.core.errors import NnperfError

    document = load_json(path)
    version = document.get("schema_version")
    if version != SCHEMA_VERSION:
        raise NnperfError(
            f"{path}: schema_version {version!r} is not supported (expected {SCHEMA_VERSION})"
        )
    return document


def read_table(
    path: str | os.PathLike,
    columns: Iterable[str] = (),
    needed_by: str | None = None,
    hint: str | None = None,
    empty_ok: bool = False,
    **options,
):
    """A CSV table (a pandas DataFrame), or NnperfError naming the file when it cannot be
    parsed or lacks one of `columns` (those the caller reads): the line says which are
    missing, what needs them (`needed_by`) and, after it, `hint` (how to write the table
    again). `empty_ok`: an empty file is a table without rows or columns (a profile that
    recorded nothing), not an error. `options` go to `pandas.read_csv`.

    Every table the pipeline reads back goes through here, so a table edited by hand or
    written by an older nnperf is one line naming it, not a pandas KeyError or a blank cell
    far from the cause.
    """
    import pandas as pd

    from nnperf.core.errors import NnperfError

    check_table(path, hint)
    try:
        frame = pd.read_csv(path, **options)
    except FileNotFoundError:
        raise NnperfError(f"{os.fspath(path)}: file not found") from None
    except pd.errors.EmptyDataError:
        if empty_ok:
            return pd.DataFrame()
        raise NnperfError(
            f"{os.fspath(path)}: not a readable CSV table (the file is empty)"
        ) from None
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise NnperfError(f"{os.fspath(path)}: not a readable CSV table ({first_line})") from None
    missing = [column for column in dict.fromkeys(columns) if column not in frame.columns]
    if missing:
        needed = f" (needed by {needed_by})" if needed_by else ""
        after = f"; {hint}" if hint else ""
        raise NnperfError(f"{os.fspath(path)}: lacks column(s) {', '.join(missing)}{needed}{after}")
    return frame


def write_csv(path: str | os.PathLike, frame) -> None:
    """Write a pandas DataFrame as CSV without its index, atomically, with its sidecar.

    The sidecar is renamed into place before the table: an interruption between the two
    leaves a table its sidecar does not describe, which readers refuse, never the reverse.
    """
    with atomic_path(path) as tmp:
        frame.to_csv(tmp, index=False)
        _write_meta(path, tmp.read_bytes(), len(frame))


META_SUFFIX = ".meta"  # not .json: a glob for run documents (*.json) must not find it


def meta_path(path: str | os.PathLike) -> Path:
    """The sidecar of table `path`: its row count and content hash."""
    return Path(f"{os.fspath(path)}{META_SUFFIX}")


def _write_meta(path: str | os.PathLike, content: bytes, rows: int) -> None:
    digest = hashlib.sha256(content).hexdigest()
    write_json(meta_path(path), {"kind": "table_meta", "rows": rows, "sha256": digest})


def copy_table(source: str | os.PathLike, target: str | os.PathLike, hint: str | None = None):
    """Copy a table and its sidecar, after checking the source against its sidecar (a
    source without one is refused: the copy would vouch for a table nothing checked)."""
    from nnperf.core.errors import NnperfError

    if not meta_path(source).is_file():
        after = f"; {hint}" if hint else ""
        raise NnperfError(f"{os.fspath(source)}: no {meta_path(source).name} beside it{after}")
    check_table(source, hint)
    content = Path(source).read_bytes()
    with atomic_path(target) as tmp:
        tmp.write_bytes(content)
        shutil.copyfile(meta_path(source), tmp.with_name(tmp.name + ".meta"))
        os.replace(tmp.with_name(tmp.name + ".meta"), meta_path(target))


def in_results_folder(path: str | os.PathLike) -> bool:
    """Whether `path` is where a results folder keeps a table (`tables/<dataset>/<name>.csv`,
    `runs/.../<variant>_windows.csv`, ...), whatever that folder is called: an older
    study's folder or another machine's is checked like `results/`."""
    from nnperf.core import layout

    kinds = [kind for kind, template in layout.TEMPLATES.items() if template.endswith(".csv")]
    parts = Path(os.path.abspath(path)).parts
    return any(
        layout.matches(kind, "results/" + "/".join(parts[start:]))
        for start in range(1, len(parts))
        for kind in kinds
    )


def _csv_rows(content: bytes) -> int:
    """Records after the header; a record cut mid-row counts as one."""
    try:
        return max(sum(1 for _ in csv.reader(io.StringIO(content.decode("utf-8")))) - 1, 0)
    except (csv.Error, UnicodeDecodeError):
        return content.count(b"\n") - 1


def check_table(path: str | os.PathLike, hint: str | None = None) -> None:
    """NnperfError (one line naming the table, what its sidecar expected and what it holds)
    unless `path` is the table `write_csv` wrote; `hint` says how to write it again."""
    from nnperf.core.errors import NnperfError

    after = f"; {hint}" if hint else ""
    name = os.fspath(path)
    meta = meta_path(path)
    if not meta.is_file():
        if in_results_folder(path) and os.path.isfile(path):
            raise NnperfError(
                f"{name}: no {meta.name} beside it (the row count and hash every table nnperf "
                f"writes carries), so it cannot be checked: written by an older nnperf or "
                f"copied without it{after}"
            )
        return
    try:
        content = Path(path).read_bytes()
    except FileNotFoundError:
        raise NnperfError(f"{name}: file not found") from None
    expected = load_json(meta, "table sidecar")
    if not isinstance(expected, dict) or not {"rows", "sha256"} <= expected.keys():
        raise NnperfError(f"{meta}: not a table sidecar (expected rows and sha256){after}")
    if hashlib.sha256(content).hexdigest() == expected["sha256"]:
        return
    found = _csv_rows(content)
    differs = "" if found != expected["rows"] else " with other content"
    raise NnperfError(
        f"{name}: not the table its writer wrote: {meta.name} expects {expected['rows']} "
        f"rows (sha256 {expected['sha256'][:12]}), the file holds {found}{differs}: cut "
        f"short or edited since{after}"
    )


def check_run_tables(run_json: str | os.PathLike) -> None:
    """Check the windows and steps tables beside a timed run's JSON (`check_table`): every
    reader of run JSONs calls this, so a per-configuration table cut short is refused too.
    A run JSON without them (named by hand, or from before they existed) has none to check."""
    from nnperf.core.layout import GROUP_MEMBER_SUFFIXES

    stem = os.fspath(run_json).removesuffix(GROUP_MEMBER_SUFFIXES["run"])
    for kind in ("run_windows", "run_steps"):
        check_table(stem + GROUP_MEMBER_SUFFIXES[kind])
