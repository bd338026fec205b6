"""Training checkpoints: what a run to accuracy needs to stop and carry on exactly.

A checkpoint is one `torch.save`d dict of plain data and tensors: the model, optimizer,
learning-rate scheduler and GradScaler states, every random-number state the run draws from
(Python's `random`, numpy's global generator, torch's CPU and CUDA generators, and the data
feeder's own generator, which holds the data order and the augmentations), the number of
epochs done, the per-epoch rows so far, and what identifies the run: model name, class count
and a fingerprint of everything that decides the trajectory (`nnperf.training.to_accuracy`).

It is read back with `torch.load(weights_only=True)`, which unpickles tensors and plain
containers only, so loading a checkpoint cannot run code; that is why every state above is
stored as tensors, lists and numbers (numpy's state is converted, not pickled). Files are
written atomically (temporary file, then rename), so a run killed while saving leaves the
previous checkpoint intact.

Three files per run, in its checkpoint folder:

    last.pt    every `checkpoint_every` epochs: what a killed run resumes from
    best.pt    whenever test top-1 improves
    final.pt   when the run ends

Any of them resumes the run at its epoch; `latest()` picks the one with the most epochs.
Whatever is wrong with a file (missing, truncated, not a checkpoint, another model, other
settings) is one NnperfError line naming the file and what is allowed. `readable()` sorts a
folder's files into those that load and those that do not, and `set_aside()` renames one that
does not to `<name>.corrupt`: the workflow's resume carries on from the newest readable one.

This module neither trains nor decides when to save (`nnperf.training.to_accuracy` does).
"""

from __future__ import annotations

import os
import pickle
import random
import re
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import torch

from nnperf.core.errors import NnperfError
from nnperf.core.files import atomic_path

FORMAT = "nnperf-training-checkpoint"
FORMAT_VERSION = 1
NAMES = {"last": "last.pt", "best": "best.pt", "final": "final.pt"}
# How torch's weights-only unpickler names a class it refuses to import.
_REFUSED_GLOBAL = re.compile(r"Unsupported global: GLOBAL ([\w.]+)")
# What a run may resume from, named in errors.
ALLOWED = "a last.pt, best.pt or final.pt that nnperf wrote for this run"


# --- random-number states as weights-only data ----------------------------------------------


def rng_states(data_generator: torch.Generator | None, cuda: bool) -> dict[str, Any]:
    """Every random state a training run draws from, as tensors, lists and numbers.

    `cuda`: include the CUDA generators (only where the run uses CUDA: reading them
    initialises CUDA). `data_generator` is the feeder's generator (data order and
    augmentation).
    """
    version, mt_state, gauss_next = random.getstate()
    numpy_state = np.random.get_state(legacy=False)
    return {
        "python": {"version": version, "state": list(mt_state), "gauss_next": gauss_next},
        "numpy": {
            "bit_generator": numpy_state["bit_generator"],
            "key": torch.from_numpy(numpy_state["state"]["key"].astype(np.int64)),
            "pos": int(numpy_state["state"]["pos"]),
            "has_gauss": int(numpy_state["has_gauss"]),
            "gauss": float(numpy_state["gauss"]),
        },
        "torch_cpu": torch.get_rng_state(),
        "torch_cuda": torch.cuda.get_rng_state_all() if cuda else None,
        "data": data_generator.get_state() if data_generator is not None else None,
    }


def restore_rng_states(states: Mapping[str, Any], data_generator: torch.Generator | None) -> None:
    """Put back what `rng_states` recorded."""
    python = states["python"]
    random.setstate((python["version"], tuple(python["state"]), python["gauss_next"]))
    numpy_state = states["numpy"]
    np.random.set_state(
        {
            "bit_generator": numpy_state["bit_generator"],
            "state": {
                "key": numpy_state["key"].numpy().astype(np.uint32),
                "pos": numpy_state["pos"],
            },
            "has_gauss": numpy_state["has_gauss"],
            "gauss": numpy_state["gauss"],
        }
    )
    torch.set_rng_state(states["torch_cpu"])
    if states.get("torch_cuda") is not None:
        torch.cuda.set_rng_state_all(states["torch_cuda"])
    if data_generator is not None and states.get("data") is not None:
        data_generator.set_state(states["data"])


# --- files --------------------------------------------------------------------------------


def path_of(folder: str | os.PathLike, which: str) -> Path:
    """`folder/last.pt`, `folder/best.pt` or `folder/final.pt`."""
    return Path(folder) / NAMES[which]


def save(path: str | os.PathLike, checkpoint: Mapping[str, Any]) -> None:
    """Write `checkpoint` (built by the training loop) atomically, with the format marker."""
    with atomic_path(path) as tmp:
        torch.save({"format": FORMAT, "format_version": FORMAT_VERSION, **checkpoint}, tmp)


def load(path: str | os.PathLike) -> dict[str, Any]:
    """Read a checkpoint with `torch.load(weights_only=True)` onto the CPU.

    Raises one NnperfError line for a missing, truncated or corrupt file, for a file that
    holds anything but tensors and plain data (weights-only loading refuses it), and for a
    file that is no nnperf checkpoint.
    """
    path = Path(path)
    if not path.is_file():
        raise NnperfError(f"{path}: checkpoint not found; allowed: {ALLOWED}")
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        # torch's weights-only unpickler names the first class it would have had to import.
        refused = _REFUSED_GLOBAL.search(str(exc))
        if refused:
            raise NnperfError(
                f"{path}: refused by weights-only loading (it holds a {refused[1]} object, not "
                f"only tensors and plain data), so it is no nnperf checkpoint; allowed: {ALLOWED}"
            ) from None
        raise NnperfError(_unreadable(path, exc)) from None
    except Exception as exc:  # noqa: BLE001 - truncated zips, bad magic numbers, EOF: all corrupt
        raise NnperfError(_unreadable(path, exc)) from None
    if not isinstance(checkpoint, dict) or checkpoint.get("format") != FORMAT:
        what = (
            f"a dict without format {FORMAT!r} (a bare state_dict?)"
            if isinstance(checkpoint, dict)
            else f"a {type(checkpoint).__name__}"
        )
        raise NnperfError(f"{path}: not an nnperf training checkpoint ({what}); allowed: {ALLOWED}")
    version = checkpoint.get("format_version")
    if version != FORMAT_VERSION:
        raise NnperfError(
            f"{path}: checkpoint format version {version!r} is not supported; allowed: "
            f"version {FORMAT_VERSION} (start the run again with this nnperf)"
        )
    return checkpoint


def _unreadable(path: Path, exc: BaseException) -> str:
    detail = " ".join(f"{type(exc).__name__}: {exc}".split())[:160]
    return (
        f"{path}: not a readable checkpoint, truncated or corrupt ({detail}); "
        f"allowed: {ALLOWED} (delete it to start the run over)"
    )


def check_identity(path: str | os.PathLike, checkpoint: Mapping[str, Any], run: Mapping) -> None:
    """Refuse a checkpoint written by another run.

    `run` holds `model`, `num_classes`, `fingerprint` and `definition` (nested plain data)
    as the training loop computes them; so does the checkpoint. A different model or class
    count is named as such; otherwise the first settings that differ are named.
    """
    if (checkpoint.get("model_name"), checkpoint.get("num_classes")) != (
        run["model"],
        run["num_classes"],
    ):
        raise NnperfError(
            f"{path}: checkpoint of model {checkpoint.get('model_name')} with "
            f"{checkpoint.get('num_classes')} classes, but this run trains {run['model']} with "
            f"{run['num_classes']} classes; allowed: a checkpoint of the same model and classes"
        )
    if checkpoint.get("fingerprint") == run["fingerprint"]:
        return
    theirs = _flatten(checkpoint.get("definition") or {})
    ours = _flatten(run["definition"])
    differing = [key for key in sorted(set(theirs) | set(ours)) if theirs.get(key) != ours.get(key)]
    shown = "; ".join(
        f"{key} {theirs.get(key)!r} there, {ours.get(key)!r} here" for key in differing[:3]
    )
    more = f" (and {len(differing) - 3} more)" if len(differing) > 3 else ""
    raise NnperfError(
        f"{path}: checkpoint was written with other settings: {shown or 'fingerprint'}{more}; "
        "allowed: resume with the settings it was written with, or start over without it"
    )


def _flatten(data: Mapping, prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(_flatten(value, name + "."))
        else:
            flat[name] = value
    return flat


def readable(folder: str | os.PathLike) -> tuple[list[tuple[Path, dict]], list[tuple[Path, str]]]:
    """The checkpoints in `folder` that load, newest first (most epochs; last, best, final
    among equals), each with its contents, and those that do not, each with the one-line
    reason (`load`'s error).

    The rule's resume (`nnperf.training.to_accuracy`) falls back on the newest readable one
    instead of starting over, so a truncated last.pt costs the epochs since best.pt, not
    the run.
    """
    good, bad = [], []
    for which in NAMES:
        path = path_of(folder, which)
        if not path.is_file():
            continue
        try:
            good.append((path, load(path)))
        except NnperfError as exc:
            bad.append((path, str(exc)))
    good.sort(key=lambda item: -int(item[1]["epoch"]))
    return good, bad


# What a corrupt checkpoint is renamed to: kept for a look, never read again.
CORRUPT_SUFFIX = ".corrupt"


def set_aside(path: str | os.PathLike) -> Path:
    """Rename a checkpoint that does not load to `<name>.corrupt` (replacing an older one),
    so no later resume reads it and nothing is deleted unseen. Returns the new path."""
    path = Path(path)
    target = path.with_name(path.name + CORRUPT_SUFFIX)
    os.replace(path, target)
    return target


def latest(folder: str | os.PathLike) -> Path | None:
    """The checkpoint in `folder` with the most epochs done (None when there is none).

    Reads each candidate's epoch; an unreadable candidate is an error, not skipped, so a
    corrupt last.pt is never silently passed over for an older best.pt.
    """
    found = [path_of(folder, which) for which in NAMES if path_of(folder, which).is_file()]
    if not found:
        return None
    return max(found, key=lambda path: int(load(path)["epoch"]))
