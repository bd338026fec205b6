"""Where every file of a study lives: path templates with `path()` and `parse()`.

The workflow's rules use these templates as their output patterns (Snakemake wildcards are
the `{names}`), the library builds paths with `path()`, and a person or a test who holds a
path gets its keys back with `parse()`. Outputs still carry their keys inside (JSON fields,
CSV columns): nothing in the pipeline reads a key out of a path.

Keys appear in a fixed order — dataset, device, model, precision, batch size, variant — so a
path names its experiment. One job measures a whole configuration (all its worker processes
and windows), so a run's files are named by the configuration alone.

Every key that changes what a number means is in the path of every file holding it, so two
studies that differ in it write beside each other, never over each other. The dataset is
one: it decides the input pipeline a step times (files decoded and augmented, or tensors
already in memory), the model's input shape and class count (its FLOPs), and what the
tables and the report describe. Only files independent of it (the prepared data itself,
the machine's ceilings) go without it.
"""

from __future__ import annotations

import re
import string
from typing import Any, Mapping

from nnperf.core import vocab
from nnperf.core.errors import NnperfError

# What each key may look like; also the workflow's `wildcard_constraints`.
KEY_PATTERNS = {
    # A built-in dataset's name or an ImageFolder's label (`vocab.DATASET_KEY_PATTERN`).
    "dataset": vocab.DATASET_KEY_PATTERN,
    "device": "|".join(vocab.DEVICES),
    "model": r"[a-z0-9_]+",
    "precision": "|".join(vocab.PRECISIONS),
    "batch_size": r"\d+",
    # A group's batch sizes, ascending, joined by "-" (`batch_sizes_key`).
    "batch_sizes": r"\d+(?:-\d+)*",
    "variant": r"[a-z][a-z0-9_]*",
    "recipe": r"[a-z][a-z0-9_]*",
    "kind": r"[a-z_]+",
    "name": r"[a-z_]+",
}
INTEGER_KEYS = ("batch_size",)

CONFIG = "{dataset}/{device}/{model}/{precision}/bs{batch_size}/{variant}"
RUN_STEM = f"results/runs/{CONFIG}"
PROFILE_STEM = f"results/profiles/{CONFIG}"
# torch.profiler operator profiles. The trace's name ends in `.pt.trace.json.gz`, the name
# TensorBoard's profiler plugin looks for: `tensorboard --logdir` on a precision's folder
# shows one run per batch size and one worker per variant.
OPPROFILE_STEM = f"results/opprofiles/{CONFIG}"
# A configuration trained to accuracy under one recipe. Its checkpoints sit beside its
# outputs but are not outputs: a killed training job runs again and resumes from them.
TRAINING_STEM = f"results/training/{CONFIG}/{{recipe}}"

TEMPLATES = {
    "dataset": "resources/data/{dataset}",
    "complexity": "results/complexity/{dataset}/{model}.json",
    "complexity_layers": "results/complexity/{dataset}/{model}_layers.csv",
    "ceilings": "results/ceilings/{device}.json",
    "ceilings_figure": "results/figures/ceilings/{device}_sweep.png",
    "run": f"{RUN_STEM}.json",
    "run_windows": f"{RUN_STEM}_windows.csv",
    "run_steps": f"{RUN_STEM}_steps.csv",
    # The job that measures a group (one model x device: every batch size, precision and
    # variant of the study) by interleaved processes writes its members' files and their
    # comparisons here; each member's files are then copied to its own paths above.
    "run_group": "results/runs/{dataset}/{device}/{model}/groups/bs{batch_sizes}",
    "profile_request": f"{PROFILE_STEM}.request.json",
    "profile_report": f"{PROFILE_STEM}.ncu-rep",
    "profile_meta": f"{PROFILE_STEM}.ncu.json",
    "profile_csv": f"{PROFILE_STEM}.csv",
    "opprofile": f"{OPPROFILE_STEM}.json",
    "opprofile_trace": f"{OPPROFILE_STEM}.pt.trace.json.gz",
    "opprofile_operators": f"{OPPROFILE_STEM}_operators.csv",
    "opprofile_layers": f"{OPPROFILE_STEM}_layers.csv",
    "opprofile_steps": f"{OPPROFILE_STEM}_steps.csv",
    "opprofile_memory": f"{OPPROFILE_STEM}_memory.csv",
    "training_run": f"{TRAINING_STEM}.json",
    "training_epochs": f"{TRAINING_STEM}_epochs.csv",
    "training_checkpoints": f"{TRAINING_STEM}_checkpoints",
    "accuracy_figure": "results/figures/accuracy/{dataset}/{device}/{model}.png",
    "operators_figure": f"results/figures/operators/{CONFIG}.png",
    "memory_figure": f"results/figures/memory/{CONFIG}.png",
    "table": "results/tables/{dataset}/{name}.csv",
    "run_figure": "results/figures/{kind}/{dataset}/{device}/{model}.png",
    "roofline_figure": f"results/figures/roofline/{CONFIG}.png",
    "roofline_steps_figure": "results/figures/roofline_steps/{dataset}/{device}.png",
    "machines_figure": "results/figures/machines/{dataset}/throughput.png",
    "summary_html": "reports/{dataset}/summary.html",
    "summary_md": "reports/{dataset}/summary.md",
}

# A group's folder holds, per member, its `member_name` + one of these suffixes, and
# GROUP_COMPARISONS.
GROUP_MEMBER_SUFFIXES = {"run": ".json", "run_windows": "_windows.csv", "run_steps": "_steps.csv"}
GROUP_COMPARISONS = "comparisons.json"


def batch_sizes_key(batch_sizes) -> str:
    """A group's batch sizes as its folder and name carry them: `16-32`."""
    return "-".join(str(b) for b in sorted({int(b) for b in batch_sizes}))


def group_batch_sizes(key: str) -> list[int]:
    """`batch_sizes_key` read back from it, or from a group's folder or name ending in it
    (`.../bs16-32`): the batch sizes the group measures; none for text that names none."""
    found = re.search(rf"(?:^|/bs)({KEY_PATTERNS['batch_sizes']})/?$", str(key))
    return [int(b) for b in found.group(1).split("-")] if found else []


def group_name(dataset: str, device: str, model: str, batch_sizes) -> str:
    """What a group is called in run documents and runs.csv: `synthetic/cpu/resnet18_cifar/
    bs16-32`."""
    return f"{dataset}/{device}/{model}/bs{batch_sizes_key(batch_sizes)}"


def member_name(precision: str, variant: str, batch_size: int | None = None) -> str:
    """A configuration's name in its group: its files' stem in the group's folder, and how
    a run JSON names its partners (`shared_with`, `comparisons_out_of_reach`). The batch
    size is in it (`fp32_bs16_tuned`) where the group measures several; a group of one is
    named as before batch sizes shared groups (`fp32_tuned`), so the tables of studies made
    then still pair their rounds."""
    if batch_size is None:
        return f"{precision}_{variant}"
    return f"{precision}_bs{int(float(batch_size))}_{variant}"


def name_in_group(group: str, precision: str, batch_size: int, variant: str) -> str:
    """A configuration's `member_name` in the group `group` (a `group_name`)."""
    several = len(group_batch_sizes(group)) > 1
    return member_name(precision, variant, batch_size if several else None)


def group_member(folder: str, kind: str, precision: str, batch_size: int, variant: str) -> str:
    """Where a group's folder holds one member's file of `kind` (a key of
    GROUP_MEMBER_SUFFIXES)."""
    name = name_in_group(folder, precision, batch_size, variant)
    return f"{folder}/{name}{GROUP_MEMBER_SUFFIXES[kind]}"


# Figures drawn per (device, model) from the run tables (`run_figure`'s kinds).
RUN_FIGURE_KINDS = ("throughput", "breakdown", "speedup")


def fields(kind: str) -> tuple[str, ...]:
    """The keys a kind of path carries, in order."""
    template = _template(kind)
    return tuple(name for _, name, _, _ in string.Formatter().parse(template) if name)


def path(kind: str, /, **keys: Any) -> str:
    """The path of one file, e.g. `path("run", device="cpu", ..., variant="baseline")`."""
    template = _template(kind)
    missing = [name for name in fields(kind) if name not in keys]
    if missing:
        raise NnperfError(f"path {kind!r} needs key {missing[0]!r}; it takes {fields(kind)}")
    return template.format(**keys)


def parse(kind: str, text: str) -> dict[str, Any]:
    """The keys of a path of `kind` (batch_size an integer), or NnperfError."""
    match = _regex(kind).search(str(text).replace("\\", "/"))
    if not match:
        raise NnperfError(f"{text!r} is not a {kind} path; expected {_template(kind)}")
    return typed_keys(match.groupdict())


def matches(kind: str, text: str) -> bool:
    """Whether `text` is a path of `kind`, each key within its pattern (KEY_PATTERNS): a
    group's folder (`.../groups/bs16-32/comparisons.json`) is not a run."""
    return _regex(kind).search(str(text).replace("\\", "/")) is not None


def typed_keys(keys: Mapping[str, Any]) -> dict[str, Any]:
    """Keys as a path's text gives them (Snakemake's wildcards, a regex match), typed:
    batch_size an integer, the rest as they are."""
    return {name: int(value) if name in INTEGER_KEYS else value for name, value in keys.items()}


def log(kind: str, /, **keys: Any) -> str:
    """The log of the job writing a path: the same path under logs/, ending in .log."""
    target = path(kind, **keys) if keys else _template(kind)
    stem = target.removeprefix("results/").removeprefix("resources/")
    return "logs/" + re.sub(r"\.(json|csv|png|ncu-rep|html|md)$", "", stem) + ".log"


def _template(kind: str) -> str:
    if kind not in TEMPLATES:
        raise NnperfError(f"path kind {kind!r} is unknown; allowed: {', '.join(TEMPLATES)}")
    return TEMPLATES[kind]


def _regex(kind: str) -> re.Pattern:
    pattern = ""
    for literal, name, _, _ in string.Formatter().parse(_template(kind)):
        pattern += re.escape(literal)
        if name:
            pattern += f"(?P<{name}>{KEY_PATTERNS[name]})"
    return re.compile(f"(?:^|/){pattern}$")
