"""nnperf's private runtime directory: where the warm fork server (`nnperf.engine.warmserver`)
keeps its socket, lock and log, and where the machine's measurement lock
(`nnperf.core.machinelock`) lives. Torch-free: a job takes the measurement lock before it
imports anything heavy.

Private to your user, for real: the folder `nnperf-warm-<uid>` is under `$XDG_RUNTIME_DIR`
when that is a usable private directory, else under the temporary directory; it is created
with mode 0700 and refused (a one-line NnperfError) unless `os.lstat` shows a real directory
owned by this user with mode 0700, and a shared parent must be sticky (nobody else may rename
it). Its files are opened with `O_NOFOLLOW`: a symlink planted in their place is an error,
never followed.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from pathlib import Path
from typing import Iterator

from nnperf.core.errors import NnperfError


def _describe(info: os.stat_result) -> str:
    kind = "a directory" if stat.S_ISDIR(info.st_mode) else "not a directory"
    if stat.S_ISLNK(info.st_mode):
        kind = "a symlink"
    return f"{kind} owned by uid {info.st_uid} with mode {stat.S_IMODE(info.st_mode):04o}"


def _is_private_dir(info: os.stat_result) -> bool:
    return (
        stat.S_ISDIR(info.st_mode)
        and info.st_uid == os.geteuid()
        and stat.S_IMODE(info.st_mode) == 0o700
    )


def runtime_base() -> Path:
    """$XDG_RUNTIME_DIR where it is a private directory of this user, else the temp dir."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isabs(runtime):
        with contextlib.suppress(OSError):
            if _is_private_dir(os.lstat(runtime)) and os.access(runtime, os.W_OK | os.X_OK):
                return Path(runtime)
    return Path(tempfile.gettempdir())


def private_dir(base: Path) -> Path:
    """`base/nnperf-warm-<uid>`, created with mode 0700, or NnperfError when what is there is
    not a real directory of this user with mode 0700, or `base` lets others rename it."""
    base_info = os.stat(base)
    shared = stat.S_IMODE(base_info.st_mode) & 0o022
    if shared and not base_info.st_mode & stat.S_ISVTX:
        raise NnperfError(
            f"nnperf's private files: {base} is writable by others and not sticky "
            f"({_describe(base_info)}); required: a private or sticky parent (set TMPDIR)"
        )
    folder = base / f"nnperf-warm-{os.geteuid()}"
    try:
        os.mkdir(folder, 0o700)
        os.chmod(folder, 0o700)  # the umask may have narrowed it; nobody else can reach it
    except FileExistsError:
        pass
    info = os.lstat(folder)
    if not _is_private_dir(info):
        raise NnperfError(
            f"nnperf's private directory {folder} is {_describe(info)}; required: a directory "
            f"owned by uid {os.geteuid()} with mode 0700 (remove it, or set TMPDIR)"
        )
    return folder


def open_private(path: Path, flags: int) -> int:
    """A descriptor of `path` (created 0600), never through a symlink (`O_NOFOLLOW`)."""
    try:
        return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise NnperfError(
                f"nnperf's private file {path} is a symlink; required: a regular file of uid "
                f"{os.geteuid()} (remove it)"
            ) from None
        raise


@contextlib.contextmanager
def locked(lock_path: Path) -> Iterator[None]:
    """Hold the lock at `lock_path` (the warm server's: one job starts a server, and a server
    removes its files under it). The file may be removed while someone waits on it, so the
    lock held must still be the file at `lock_path`; otherwise wait on the new one."""
    import fcntl

    while True:
        fd = open_private(lock_path, os.O_RDWR | os.O_CREAT)
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            current = os.lstat(lock_path)
        except FileNotFoundError:
            current = None
        if current is not None and current.st_ino == os.fstat(fd).st_ino:
            break
        os.close(fd)
    try:
        yield
    finally:
        os.close(fd)
