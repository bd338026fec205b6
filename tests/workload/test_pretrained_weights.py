"""Pretrained weights downloaded as torch hub does: from a real HTTP server (a thread on
localhost) serving a real state_dict under the name torchvision gives it,
`<name>-<sha256 prefix>.pth`; a corrupt file refused in one line; offline, a local file
works and a missing one is one line naming where to put it and the URL; and the workflow's
`download_weights` rule planned only when torch hub's cache lacks the file."""

from __future__ import annotations

import functools
import hashlib
import http.server
import shutil
import socket
import threading
from pathlib import Path

import pytest
import torch

from nnperf.core.errors import NnperfError
from nnperf.workload import models

from conftest import run_snakemake


def _named_by_hash(path: Path, stem: str) -> Path:
    """`path` renamed `<stem>-<first 8 hex of its SHA-256>.pth`, torchvision's naming."""
    prefix = hashlib.sha256(path.read_bytes()).hexdigest()[:8]
    return path.rename(path.with_name(f"{stem}-{prefix}.pth"))


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:  # no request lines on the test's stderr
        pass


@pytest.fixture
def served(tmp_path):
    """A folder served over HTTP on localhost, and its base URL."""
    root = tmp_path / "served"
    root.mkdir()
    handler = functools.partial(_QuietHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def tiny_weights(served) -> tuple[Path, str]:
    """A tiny real state_dict, saved with torch.save and named by its hash, on the server."""
    root, base = served
    torch.manual_seed(0)
    path = root / "tiny.pth"
    torch.save(torch.nn.Linear(4, 3).state_dict(), path)
    named = _named_by_hash(path, "tiny")
    return named, f"{base}/{named.name}"


def _closed_port_url(name: str) -> str:
    """A URL nothing listens on: what an offline machine meets, deterministically."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/{name}"


def test_a_download_is_checked_against_the_hash_in_its_name(tiny_weights, tmp_path):
    source, url = tiny_weights
    destination = tmp_path / "hub" / "checkpoints" / source.name
    assert models.published_hash_prefix(url) == source.name.split("-")[1][:8]
    assert models.ensure_weights_file(url, destination) == destination
    assert destination.read_bytes() == source.read_bytes()
    state = models.load_state_dict_file(destination)
    assert set(state) == {"weight", "bias"} and state["weight"].shape == (3, 4)
    # Present: not fetched again (the server may be gone).
    assert models.ensure_weights_file(_closed_port_url(source.name), destination) == destination


def test_a_corrupt_download_is_refused_in_one_line(tiny_weights, tmp_path):
    source, url = tiny_weights
    source.write_bytes(source.read_bytes()[:-7] + b"corrupt")  # the name keeps the old hash
    destination = tmp_path / "hub" / "checkpoints" / source.name
    with pytest.raises(NnperfError) as info:
        models.ensure_weights_file(url, destination)
    message = str(info.value)
    prefix = models.published_hash_prefix(source.name)
    assert message.startswith(f"{url}: downloaded file refused, its SHA-256 ")
    assert message.endswith(
        f"does not start with {prefix}, the hash in its name (a corrupt or replaced file); "
        f"nothing was written to {destination}"
    )
    assert "\n" not in message
    assert not destination.exists()
    assert list(destination.parent.iterdir()) == []  # torch hub's temporary file is gone too


def test_offline_a_missing_file_names_where_to_put_it_and_the_url(tmp_path):
    url = _closed_port_url("resnet18-f37072fd.pth")
    destination = tmp_path / "hub" / "checkpoints" / "resnet18-f37072fd.pth"
    with pytest.raises(NnperfError) as info:
        models.ensure_weights_file(url, destination)
    message = str(info.value)
    assert message.startswith(f"{destination}: weights file not found and its download failed (")
    assert message.endswith(f"); fetch {url} on a machine with network access and put it there")
    assert "\n" not in message and not destination.exists()


def test_a_missing_file_on_the_server_is_one_line(served, tmp_path):
    _, base = served
    destination = tmp_path / "absent-00000000.pth"
    with pytest.raises(NnperfError, match=r"download failed \(HTTP 404 File not found\); fetch "):
        models.ensure_weights_file(f"{base}/absent-00000000.pth", destination)


def test_offline_a_local_file_is_read_and_never_fetched(tiny_weights, tmp_path, monkeypatch):
    """`pretrained_path` is the user's copy: read as it is, even when torch hub's cache is
    empty and no network is there."""
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    entry = models.pretrained_weights("resnet18", "IMAGENET1K_V1")
    local, _ = tiny_weights
    assert models.find_weights_file(entry, str(local)) == local
    assert models.weights_input("resnet18", "IMAGENET1K_V1", str(local)) == local
    missing = tmp_path / "nowhere.pth"
    with pytest.raises(NnperfError) as info:
        models.find_weights_file(entry, str(missing))
    assert str(info.value) == (
        f"{missing}: pretrained weights ResNet18_Weights.IMAGENET1K_V1 not found "
        f"(convergence.pretrained_path); put the file there (it is {entry.url}) or set "
        "pretrained_path to null to use torch hub's cache"
    )
    assert not (tmp_path / "torch").exists()


def test_the_hub_cache_path_is_torch_s(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    entry = models.pretrained_weights("resnet50", "IMAGENET1K_V1")
    assert models.hub_weights_path(entry) == Path(torch.hub.get_dir()) / "checkpoints" / (
        "resnet50-0676ba61.pth"
    )
    assert models.weights_urls([("resnet50", "IMAGENET1K_V1"), ("resnet18", "DEFAULT")]) == {
        "resnet50-0676ba61.pth": "https://download.pytorch.org/models/resnet50-0676ba61.pth",
        "resnet18-f37072fd.pth": "https://download.pytorch.org/models/resnet18-f37072fd.pth",
    }


PRETRAINED_STUDY = """\
models: [resnet18]
batch_sizes: [8]
precisions: [fp32]
variants:
  baseline: {{}}
convergence:
  batch_sizes: null
recipes:
  finetune:
    epochs: 1
    pretrained: IMAGENET1K_V1
    input_size: 32
    pretrained_path: {path}
"""


def _dry_run(workdir: Path, study: Path, torch_home: Path):
    import os

    os.environ["TORCH_HOME"] = str(torch_home)
    try:
        return run_snakemake(workdir, "-n", "--configfile", str(study))
    finally:
        del os.environ["TORCH_HOME"]


@pytest.mark.workflow
def test_the_workflow_downloads_weights_only_when_the_hub_cache_lacks_them(workdir, tmp_path):
    study = workdir / "pretrained.yaml"
    study.write_text(PRETRAINED_STUDY.format(path="null"), encoding="utf-8")
    cached = tmp_path / "torch" / "hub" / "checkpoints" / "resnet18-f37072fd.pth"
    result = _dry_run(workdir, study, tmp_path / "torch")
    assert result.returncode == 0, result.stderr
    assert "rule download_weights:" in result.stdout
    assert f"output: {cached}" in result.stdout
    # The training job reads it from there.
    training = result.stdout.split("rule train_to_accuracy:")[1].split("\n\n")[0]
    assert str(cached) in training
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"a copy put there by hand")
    result = _dry_run(workdir, study, tmp_path / "torch")
    assert result.returncode == 0, result.stderr
    assert "rule download_weights:" not in result.stdout


@pytest.mark.workflow
def test_the_workflow_refuses_a_missing_local_weights_file_in_one_line(workdir, tmp_path):
    missing = tmp_path / "resnet18-copy.pth"
    study = workdir / "pretrained.yaml"
    study.write_text(PRETRAINED_STUDY.format(path=str(missing)), encoding="utf-8")
    result = _dry_run(workdir, study, tmp_path / "torch")
    assert result.returncode != 0
    assert (
        f"nnperf: {missing}: pretrained weights ResNet18_Weights.IMAGENET1K_V1 not found "
        "(convergence.pretrained_path)" in result.stdout + result.stderr
    )
    shutil.copy(Path(__file__), missing)  # any file: the dry run only asks that it is there
    result = _dry_run(workdir, study, tmp_path / "torch")
    assert result.returncode == 0, result.stderr
    assert "rule download_weights:" not in result.stdout
