"""Which model a name of config `models:` means, asked while the DAG is built.

A model name is one path-safe key (`[a-z0-9_]+`) and means one of four sources:

* `registry`: nnperf's own networks (`nnperf.workload.models.MODELS`, the `_cifar` forms
  and six torchvision ImageNet models), named here without importing torch;
* `torchvision`: any other torchvision classification model by its torchvision name
  (`torchvision.models.list_models(module=torchvision.models)`: `vit_b_16`, `regnet_y_400mf`);
* `timm`: a timm model, as `timm_<timm name>` or a mapping `{name: r50d, timm: resnet50d}`
  (timm is an optional extra: `pip install 'nnperf[timm]'`);
* `factory`: the user's code, a mapping `{name: mynet, factory: "models/mynet.py:build"}` (a
  file relative to the working directory, or `package.module:callable`).

`check_model` refuses what can be refused without building anything, each with one line:
an unknown name (with the closest known names), a factory file or callable that does not
exist (the callable is looked for in the file's syntax tree, so the user's module is not
imported), a timm name where timm is not installed. A study of registry models imports
nothing here; torchvision's list costs importing torch (a few seconds) and is asked only for a
name outside the registry, timm's only for a timm name. Building the model, and so a factory
that raises or returns the wrong output, is the job's (`nnperf.workload.models`).
"""

from __future__ import annotations

import ast
import difflib
import functools
import importlib.util
import re
from pathlib import Path

from nnperf.core.errors import NnperfError
from nnperf.core.settings import ModelSource

# nnperf.workload.models.MODEL_NAMES, spelt out so the DAG can be built without torch
# (tests/workload/test_model_sources.py holds the two equal).
REGISTRY_NAMES = (
    "mobilenet_v2",
    "mobilenet_v2_cifar",
    "resnet18",
    "resnet18_cifar",
    "resnet34",
    "resnet34_cifar",
    "resnet50",
    "resnet50_cifar",
    "vgg16",
    "vgg16_bn",
    "vgg16_bn_cifar",
    "vgg16_cifar",
)
TIMM_PREFIX = "timm_"
# The `{model}` key's pattern (nnperf.core.layout.KEY_PATTERNS["model"]).
NAME_PATTERN = re.compile(r"[a-z0-9_]+")
KINDS = ("registry", "torchvision", "timm", "factory")
TIMM_INSTALL = "pip install 'nnperf[timm]'"


@functools.cache
def torchvision_names() -> tuple[str, ...]:
    """torchvision's classification models (its detection, segmentation and video models
    live in sub-modules and are left out)."""
    import torchvision

    return tuple(torchvision.models.list_models(module=torchvision.models))


def timm_installed() -> bool:
    return importlib.util.find_spec("timm") is not None


@functools.cache
def timm_names() -> tuple[str, ...]:
    """timm's architectures (without pretrained tags); () where timm is not installed."""
    if not timm_installed():
        return ()
    import timm

    return tuple(timm.list_models())


def timm_name(name: str, source: ModelSource | None = None) -> str | None:
    """The timm name model `name` stands for, or None for a model of another source."""
    if source is not None and source.factory is not None:
        return None
    if source is not None and source.timm is not None:
        return source.timm
    return name[len(TIMM_PREFIX) :] if name.startswith(TIMM_PREFIX) else None


def kind_of(name: str, source: ModelSource | None = None) -> str:
    """Which source model `name` is built from (one of KINDS), without checking it exists."""
    if source is not None and source.factory is not None:
        return "factory"
    if timm_name(name, source) is not None:
        return "timm"
    return "registry" if name in REGISTRY_NAMES else "torchvision"


def known_names() -> list[str]:
    """Every plain name a study can give here: the registry, torchvision, `timm_*`."""
    timm = [TIMM_PREFIX + n for n in timm_names()]
    return list(dict.fromkeys([*REGISTRY_NAMES, *torchvision_names(), *timm]))


def unknown_model(name: str, where: str = "model") -> NnperfError:
    """The one line for a name no source knows, with the closest known names."""
    if ":" in name:
        # A factory spec given where a name goes (`--model mynet:MyNet`).
        return NnperfError(
            f"{where} {name!r} is not a name; your own code goes in config models: as "
            "{name: mynet, factory: 'mynet.py:MyNet'}, or nnperf run/train --model mynet "
            "--model-factory mynet.py:MyNet"
        )
    close = difflib.get_close_matches(name, known_names(), n=4, cutoff=0.6)
    hint = f"closest: {', '.join(close)}" if close else "see `nnperf models`"
    timm = "" if timm_installed() else f"; timm models (timm_<name>) need {TIMM_INSTALL}"
    return NnperfError(
        f"{where} {name!r} is unknown ({hint}); allowed: an nnperf registry name, a torchvision "
        f"classification model, timm_<timm name>, or a mapping with factory:{timm}"
    )


def split_factory(spec: str, name: str = "?") -> tuple[str, str]:
    """(file or module, callable) of a factory spec `target:callable`."""
    target, sep, attribute = spec.rpartition(":")
    if not sep or not target or not attribute.isidentifier():
        raise NnperfError(
            f"config models entry {name!r}: factory = {spec!r} is not allowed; allowed: "
            "'path/to/file.py:callable' or 'package.module:callable'"
        )
    return target, attribute


def is_file_target(target: str) -> bool:
    """A factory target is a file path (not a dotted module) when it looks like one."""
    return target.endswith(".py") or "/" in target or "\\" in target


def factory_file(spec: str, name: str = "?") -> Path:
    """The source file of factory `spec`: the file it names (relative to the working
    directory), or the module's file, found without importing the module itself. One line
    when there is none."""
    target, _ = split_factory(spec, name)
    if is_file_target(target):
        path = Path(target).expanduser()
        if not path.is_file():
            raise NnperfError(
                f"config models entry {name!r}: factory file {target} does not exist (relative "
                f"paths are from {Path.cwd()}); allowed: an existing .py file"
            )
        return path
    try:
        found = importlib.util.find_spec(target)
    except (ImportError, ValueError) as exc:
        found, reason = None, f"{type(exc).__name__}: {exc}"
    else:
        reason = "no such module on sys.path / PYTHONPATH"
    if found is None or not found.origin or not Path(found.origin).is_file():
        raise NnperfError(
            f"config models entry {name!r}: factory module {target} cannot be found ({reason});"
            " allowed: a module on PYTHONPATH, or a file path ending in .py"
        )
    return Path(found.origin)


def _module_level(body: list[ast.stmt]):
    """The statements that run at a module's top level, inside `if`/`try`/`with`/`for` too
    (not inside functions and classes)."""
    for node in body:
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            for field in ("body", "orelse", "finalbody", "handlers"):
                inner = getattr(node, field, None)
                if isinstance(inner, list):
                    yield from _module_level([n for n in inner if isinstance(n, ast.stmt)])
                    for handler in (n for n in inner if isinstance(n, ast.ExceptHandler)):
                        yield from _module_level(handler.body)


def _binds(tree: ast.Module, attribute: str) -> bool | None:
    """Whether a module binds `attribute` at its top level; None when that cannot be told
    without running it (a star import, a module `__getattr__`, `globals()` writes)."""
    unknown = False
    for node in _module_level(tree.body):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if node.name == attribute:
                return True
            unknown |= node.name == "__getattr__"
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                unknown |= alias.name == "*"
                if (alias.asname or alias.name.split(".")[0]) == attribute:
                    return True
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.For, ast.With)):
            targets = (
                node.targets
                if isinstance(node, ast.Assign)
                else [item.optional_vars for item in node.items if item.optional_vars]
                if isinstance(node, ast.With)
                else [node.target]
            )
            for target in targets:
                if any(isinstance(n, ast.Name) and n.id == attribute for n in ast.walk(target)):
                    return True
        elif isinstance(node, ast.Expr) and "globals()" in ast.unparse(node):
            unknown = True
    return None if unknown else False


def check_factory(spec: str, name: str) -> Path:
    """The factory's file, after checking it exists and defines the callable (read, not
    imported); one line otherwise."""
    path = factory_file(spec, name)
    _, attribute = split_factory(spec, name)
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (OSError, UnicodeDecodeError, SyntaxError) as exc:
        where = f", line {exc.lineno}" if getattr(exc, "lineno", None) else ""
        raise NnperfError(
            f"config models entry {name!r}: factory file {path} cannot be read "
            f"({type(exc).__name__}{where}: {getattr(exc, 'msg', exc)})"
        ) from None
    if _binds(tree, attribute) is False:
        defined = [
            n.name
            for n in tree.body
            if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and not n.name.startswith("_")
        ]
        raise NnperfError(
            f"config models entry {name!r}: {path} defines no {attribute!r}; allowed: "
            f"{', '.join(defined) or 'a function or class defined at its top level'}"
        )
    return path


def check_model(
    name: str, source: ModelSource | None = None, where: str = "config models entry"
) -> str:
    """The kind of model `name` (KINDS), after the checks that need no model built; one
    NnperfError line for an unknown name, a missing factory or callable, timm absent."""
    if ":" in name and source is None:
        raise unknown_model(name, where)
    if not NAME_PATTERN.fullmatch(name):
        raise NnperfError(
            f"config models entry {name!r} is not allowed as a name; allowed: lower-case "
            "letters, digits and underscores (it is a path key; a timm name with other "
            "characters goes in a mapping, {name: r50a1, timm: resnet50.a1_in1k})"
        )
    kind = kind_of(name, source)
    if kind == "factory":
        check_factory(source.factory, name)
    elif kind == "timm":
        wanted = timm_name(name, source)
        if not timm_installed():
            raise NnperfError(
                f"config models entry {name!r} is a timm model ({wanted}) and timm is not "
                f"installed here; {TIMM_INSTALL}, or leave the model out"
            )
        if "/" in wanted or ":" in wanted:
            raise NnperfError(
                f"config models entry {name!r}: timm = {wanted!r} names a Hugging Face hub "
                "model, which nnperf does not fetch; allowed: a timm architecture name"
            )
        architecture = wanted.split(".", 1)[0]
        if architecture not in timm_names():
            close = difflib.get_close_matches(architecture, timm_names(), n=4, cutoff=0.6)
            hint = f"closest: {', '.join(close)}" if close else "see `nnperf models --timm`"
            raise NnperfError(
                f"config models entry {name!r}: timm has no model {architecture!r} ({hint})"
            )
    elif kind == "torchvision" and name not in torchvision_names():
        raise unknown_model(name, where)
    return kind


def check_models(models: list) -> None:
    """Check every entry of config `models:` (strings and mappings) with `check_model`, and
    refuse a name given twice."""
    seen: set[str] = set()
    for entry in models:
        source = entry if isinstance(entry, ModelSource) else None
        if isinstance(entry, dict):
            source = ModelSource(**entry)
        name = entry if isinstance(entry, str) else source.name
        if name in seen:
            raise NnperfError(f"config models names {name!r} twice; allowed: each name once")
        seen.add(name)
        check_model(name, source)


def source_files(name: str, source: ModelSource | None) -> list[str]:
    """The user's code a model is built from (its factory's file): an input of every job
    that builds it, so editing the file re-runs them. [] for the other sources."""
    if source is None or source.factory is None:
        return []
    return [str(factory_file(source.factory, name))]
