"""The warm fork server as a hostile neighbour would try it: real directories, real sockets,
real server processes, real users (root switches to `nobody` where a test needs another one).

What a neighbour could try, and what must happen:

* create the server's directory first, or widen it: refused, with a line naming its owner and
  mode and what is required;
* plant a symlink where the lock or log file goes: never followed;
* connect to the server, or stand in for it: the other side's user is checked;
* send a pickle, or a message of another version: refused, nothing executed;
* and what a study needs: one server for every Snakemake invocation of one environment, no
  files left after the server exits.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import re
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from nnperf.core.errors import NnperfError
from nnperf.engine import warmprotocol, warmserver

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="SO_PEERCRED and the server are Linux's"
)
SRC = Path(__file__).resolve().parents[2] / "src"
NOBODY = 65534
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another user")


@pytest.fixture
def base() -> Path:
    """A short, private parent folder (socket paths are limited to 108 bytes)."""
    folder = Path(tempfile.mkdtemp(prefix="nnperf-t", dir="/tmp"))
    yield folder
    subprocess.run(["rm", "-rf", str(folder)], check=False)


# --- the directory and its files -------------------------------------------------------------


def test_the_directory_is_created_private_whatever_the_umask(base):
    old = os.umask(0o022)
    try:
        folder = warmserver.private_dir(base)
    finally:
        os.umask(old)
    info = os.lstat(folder)
    assert folder.name == f"nnperf-warm-{os.geteuid()}"
    assert (info.st_uid, info.st_mode & 0o777) == (os.geteuid(), 0o700)
    assert warmserver.private_dir(base) == folder  # an existing private folder is used


def test_a_directory_with_a_wider_mode_is_refused(base):
    folder = base / f"nnperf-warm-{os.geteuid()}"
    folder.mkdir()
    os.chmod(folder, 0o777)
    with pytest.raises(NnperfError) as refused:
        warmserver.private_dir(base)
    message = str(refused.value)
    assert "\n" not in message and str(folder) in message
    assert "with mode 0777" in message and "mode 0700" in message
    assert os.lstat(folder).st_mode & 0o777 == 0o777  # refused, not silently "fixed"


@as_root
def test_a_directory_another_user_created_first_is_refused(base):
    folder = base / f"nnperf-warm-{os.geteuid()}"
    folder.mkdir(mode=0o700)
    os.chown(folder, NOBODY, NOBODY)
    with pytest.raises(
        NnperfError,
        match=f"owned by uid {NOBODY} with mode 0700; required: "
        f"a directory owned by uid {os.geteuid()}",
    ):
        warmserver.private_dir(base)


def test_a_symlink_in_place_of_the_directory_is_refused(base):
    elsewhere = base / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (base / f"nnperf-warm-{os.geteuid()}").symlink_to(elsewhere)
    with pytest.raises(NnperfError, match="is a symlink owned by"):
        warmserver.private_dir(base)


def test_a_shared_parent_that_is_not_sticky_is_refused(base):
    os.chmod(base, 0o777)
    with pytest.raises(NnperfError, match="writable by others and not sticky"):
        warmserver.private_dir(base)
    os.chmod(base, 0o1777)  # /tmp's mode: others cannot rename what is ours
    assert warmserver.private_dir(base).is_dir()


def test_a_symlinked_lock_or_log_file_is_not_followed(base):
    folder = warmserver.private_dir(base)
    precious = base / "precious"
    precious.write_text("keep me\n")
    lock = folder / "server.lock"
    lock.symlink_to(precious)
    with pytest.raises(NnperfError, match=f"private file {lock} is a symlink"):
        with warmserver.locked(lock):
            pass
    log = folder / "server.log"
    log.symlink_to(precious)
    with pytest.raises(NnperfError, match="is a symlink"):
        warmserver.open_private(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    assert precious.read_text() == "keep me\n"


def test_the_runtime_dir_is_used_only_when_it_is_private(base, monkeypatch):
    runtime = base / "run"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    assert warmserver.runtime_base() == runtime
    os.chmod(runtime, 0o755)
    assert warmserver.runtime_base() == Path(tempfile.gettempdir())
    monkeypatch.setenv("XDG_RUNTIME_DIR", "relative/run")
    assert warmserver.runtime_base() == Path(tempfile.gettempdir())


# --- the key ---------------------------------------------------------------------------------


def test_every_snakemake_invocation_of_one_environment_maps_to_one_server(monkeypatch):
    """Snakemake puts a per-invocation script cache on sys.path and sets variables of its
    own; none of it changes what a worker runs, so none of it may change the server."""
    before = warmserver.address(warmserver.identity())
    monkeypatch.syspath_prepend("/tmp/tmpab12cd34/.snakemake/scripts")
    monkeypatch.setenv("SNAKEMAKE_PROFILE", "/tmp/tmpab12cd34/profile")
    monkeypatch.setenv("TMP_SCRIPT_CACHE", "/tmp/tmpab12cd34")
    first = warmserver.address(warmserver.identity())
    monkeypatch.syspath_prepend("/tmp/tmpef56gh78/.snakemake/scripts")
    monkeypatch.setenv("SNAKEMAKE_PROFILE", "/tmp/tmpef56gh78/profile")
    monkeypatch.setenv("TMP_SCRIPT_CACHE", "/tmp/tmpef56gh78")
    assert warmserver.address(warmserver.identity()) == first == before


@pytest.mark.parametrize(
    "variable, value",
    [("CUDA_VISIBLE_DEVICES", "7"), ("OMP_NUM_THREADS", "1"), ("LD_PRELOAD", "libfake.so")],
)
def test_what_a_worker_would_see_differently_gets_a_server_of_its_own(monkeypatch, variable, value):
    monkeypatch.delenv(variable, raising=False)
    before = warmserver.address(warmserver.identity())
    monkeypatch.setenv(variable, value)
    assert warmserver.address(warmserver.identity()) != before


# --- the messages ----------------------------------------------------------------------------


def frame(body: bytes) -> bytes:
    return struct.pack("!I", len(body)) + body


class MakesAFolder:
    """A pickle that runs code when loaded: it would create `path`."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return (os.mkdir, (self.path,))


def test_decode_takes_only_versioned_json(tmp_path):
    assert warmprotocol.decode(b'{"v": 1, "m": ["window"]}') == ["window"]
    marker = tmp_path / "pwned"
    for body, reason in [
        (pickle.dumps(MakesAFolder(str(marker))), "not JSON"),
        (b'{"v": 2, "m": "window"}', "version 2"),
        (b'["window"]', 'expected {"v": 1'),
        (b'{"v": 1, "m": 1, "x": 0}', 'expected {"v": 1'),
    ]:
        with pytest.raises(NnperfError, match=reason):
            warmprotocol.decode(body)
    assert not marker.exists()


# --- a real server ---------------------------------------------------------------------------


def start_server(folder: Path, idle_exit_s: float = 600.0) -> tuple[subprocess.Popen, Path]:
    """A real server (it imports torch: seconds) on `folder/s.sock`, logging to s.log."""
    path = folder / "s.sock"
    code = (
        "import sys; from pathlib import Path; from nnperf.engine.warmserver import serve; "
        "serve(Path(sys.argv[1]), float(sys.argv[2]))"
    )
    with open(path.with_suffix(".log"), "wb") as log:
        server = subprocess.Popen(
            [sys.executable, "-c", code, str(path), str(idle_exit_s)],
            stdout=log,
            stderr=log,
            cwd="/",
            env={**os.environ, "PYTHONPATH": str(SRC)},
        )
    deadline = time.monotonic() + 300
    while not path.exists():
        assert server.poll() is None, path.with_suffix(".log").read_text()
        assert time.monotonic() < deadline, "the server did not start"
        time.sleep(0.05)
    return server, path


@pytest.fixture(scope="module")
def server():
    """One real server for the message tests, in a folder others may traverse (so that a
    test can reach it as another user: only the server's own check stands in the way)."""
    folder = Path(tempfile.mkdtemp(prefix="nnperf-s", dir="/tmp"))
    os.chmod(folder, 0o755)
    process, path = start_server(folder)
    yield process, path
    if process.poll() is None:
        process.kill()
        process.wait()
    subprocess.run(["rm", "-rf", str(folder)], check=False)


def test_the_socket_is_private_to_its_user(server):
    _, path = server
    info = os.lstat(path)
    assert info.st_uid == os.geteuid() and info.st_mode & 0o077 == 0  # bound under umask 077


def send_raw(path: Path, body: bytes, framed: bool = True) -> tuple[object, str]:
    """Send `body` as a request; (the reply, or None at EOF; what the worker wrote)."""
    read_fd, write_fd = os.pipe()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
        client.connect(str(path))
        socket.send_fds(client, [warmprotocol.OUTPUT_HEADER], [write_fd])
        os.close(write_fd)
        client.sendall(frame(body) if framed else body)
        client.settimeout(120)
        try:
            reply = warmprotocol.JsonConnection(client).recv()
        except EOFError:
            reply = None
    with os.fdopen(read_fd, "rb") as output:
        return reply, output.read().decode()


def test_a_pickle_is_refused_and_never_run(server, tmp_path):
    _, path = server
    marker = tmp_path / "pwned"
    bomb = pickle.dumps(MakesAFolder(str(marker)))
    reply, output = send_raw(path, bomb)
    assert reply[:2] == ["error", "nnperf"] and "not JSON; refused" in reply[2]
    assert "refused a request" in output  # said on the job's own output, not hidden
    # Unframed, its first bytes read as an absurd length: refused before anything is read.
    reply, _ = send_raw(path, bomb, framed=False)
    assert reply[:2] == ["error", "nnperf"] and "bytes; refused" in reply[2]
    assert not marker.exists()


def test_a_message_of_another_version_or_shape_is_refused(server):
    _, path = server
    reply, _ = send_raw(path, json.dumps({"v": 2, "m": {"kind": "job"}}).encode())
    assert reply[0] == "error" and "version 2; this side speaks 1" in reply[2]
    reply, _ = send_raw(path, json.dumps({"v": 1, "m": {"kind": "job", "cwd": "/"}}).encode())
    assert reply[0] == "error" and "a request needs exactly" in reply[2]
    job = {
        "kind": "job",
        "cwd": "/",
        "process": 0,
        "collect_environment": False,
        "workflow_dir": None,
        "request": {
            "device": "cpu",
            "model": "resnet18_cifar",
            "precision": "fp32",
            "batch_size": 4,
            "model_factory": "os.system",
        },
    }
    reply, _ = send_raw(path, json.dumps({"v": 1, "m": job}).encode())
    assert reply[0] == "error" and "request.model_factory is not a setting" in reply[2]


def _connect_as(uid: int, path: Path) -> int:
    """In a forked child: become `uid`, connect and send a request. Exit status 0 when the
    server closed the connection without a word, 1 when it answered, 2 when unreachable."""
    pid = os.fork()
    if pid == 0:
        code = 3
        try:
            os.setgid(uid)
            os.setuid(uid)
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
                try:
                    client.connect(str(path))
                except OSError:
                    os._exit(2)
                client.settimeout(60)
                with contextlib.suppress(OSError):
                    client.sendall(frame(b'{"v": 1, "m": "window"}'))
                try:
                    code = 0 if client.recv(1) == b"" else 1
                except ConnectionResetError:
                    code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


@as_root
def test_a_client_of_another_user_is_refused_by_the_server(server):
    _, path = server
    assert _connect_as(NOBODY, path) == 2  # the socket's mode alone keeps it out
    os.chmod(path, 0o666)  # as if the mode were wider: the server's own check remains
    try:
        assert _connect_as(NOBODY, path) == 0
    finally:
        os.chmod(path, 0o700)
    log = path.with_suffix(".log").read_text()
    assert "refused pid" in log and f"of uid {NOBODY}" in log


@as_root
def test_a_server_of_another_user_is_refused_by_the_client(base):
    os.chmod(base, 0o777)
    path = base / "s.sock"
    pid = os.fork()
    if pid == 0:
        try:
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            listener.bind(str(path))
            listener.listen(1)
            time.sleep(60)
        finally:
            os._exit(0)
    try:
        deadline = time.monotonic() + 30
        while not path.exists():
            assert time.monotonic() < deadline
            time.sleep(0.01)
        with pytest.raises(NnperfError, match=f"served by uid {NOBODY} .*required: uid 0"):
            warmserver.open_connection(path)
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


def _wait_gone(process: subprocess.Popen, timeout_s: float) -> int:
    return process.wait(timeout=timeout_s)


def test_the_servers_files_are_gone_after_sigterm(server):
    process, path = server
    lock = path.with_suffix(".lock")
    lock.touch()  # as a job that started the server leaves it
    process.send_signal(signal.SIGTERM)
    assert _wait_gone(process, 60) == 0
    assert not path.exists() and not lock.exists() and not path.with_suffix(".log").exists()


def test_the_servers_files_are_gone_after_it_idles_out(base):
    folder = warmserver.private_dir(base)
    process, path = start_server(folder, idle_exit_s=1.0)
    path.with_suffix(".lock").touch()
    assert _wait_gone(process, 120) == 0
    assert sorted(folder.iterdir()) == []


def test_only_a_live_child_of_the_checked_server_counts_as_its_worker():
    """The job SIGKILLs the PID a worker reports only if it is the server's child: a reply
    naming another process (a forged one, a reused PID) is not killed."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert warmserver.is_child_of(child.pid, os.getpid())
        assert not warmserver.is_child_of(child.pid, 1)
        assert not warmserver.is_child_of(os.getpid(), os.getpid())
        assert not warmserver.is_child_of(str(child.pid), os.getpid())  # not even an int
        started = warmserver.process_start(child.pid)
        assert started is not None and warmserver.process_start(child.pid) == started
    finally:
        child.kill()
        child.wait()
    assert not warmserver.is_child_of(child.pid, os.getpid())
    assert warmserver.process_start(child.pid) is None


# --- a server that cannot start --------------------------------------------------------------

START_SCRIPT = """
import resource, sys
from nnperf.engine import warmserver
if sys.argv[1] != "0":
    # The address space mapped now (no torch yet) plus a little: the server inherits it.
    with open("/proc/self/status") as status:
        vm_kib = next(int(line.split()[1]) for line in status if line.startswith("VmSize"))
    limit = vm_kib * 1024 + int(sys.argv[1]) * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (limit, resource.RLIM_INFINITY))
warmserver.connect()
"""


def failed_start(base: Path, limit_mib: int, pythonpath: str) -> tuple[str, Path]:
    """Start a server from a fresh job process that cannot start one; (its stderr, the
    private folder the server's files would be in)."""
    runtime = base / "run"
    runtime.mkdir(mode=0o700)
    done = subprocess.run(
        [sys.executable, "-c", START_SCRIPT, str(limit_mib)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": pythonpath, "XDG_RUNTIME_DIR": str(runtime)},
    )
    assert done.returncode != 0
    return done.stderr, runtime / f"nnperf-warm-{os.geteuid()}"


def cause_line(stderr: str) -> str:
    return next(line for line in stderr.splitlines() if line.startswith("RuntimeError: "))


def test_a_server_whose_import_fails_says_why_and_leaves_no_lock(base):
    fake = base / "fake"
    (fake / "torchvision").mkdir(parents=True)
    (fake / "torchvision" / "__init__.py").write_text(
        "raise ImportError('injected: this torchvision is broken')\n"
    )
    stderr, folder = failed_start(base, 0, f"{fake}:{SRC}")
    assert re.match(
        r"RuntimeError: the warm fork server did not start: exit code 3; could not import "
        r"nnperf\.[\w.]+: ImportError: injected: this torchvision is broken \(",
        cause_line(stderr),
    ), stderr[-3000:]
    assert sorted(folder.iterdir()) == []  # no lock, socket, log or record left behind


def test_a_server_under_a_memory_limit_names_the_cause_and_leaves_no_lock(base):
    stderr, folder = failed_start(base, 256, str(SRC))
    line = cause_line(stderr)
    # How it ended, and what it (or a native library) said: never "its output:" and nothing.
    assert re.match(
        r"RuntimeError: the warm fork server did not start: (exit code \d+|killed by SIG\w+); "
        r"(could not import \w+: \w+|its first words: \S+)",
        line,
    ), stderr[-3000:]
    assert sorted(folder.iterdir()) == []
