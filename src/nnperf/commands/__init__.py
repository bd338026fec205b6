"""Thin command-line adapters: parse flags, build a request (`nnperf.core.contract`), call the
library.

`add_fields()` makes a verb's flags from the fields of a request or settings class, so the
flags mirror the config keys (`batch_size` -> `--batch-size`) and take the class's defaults,
which are stated there and nowhere else; `field_values()` reads them back. `add_study_flags()`
gives the verbs that read a whole study (`doctor`, `gpu-study`, `plan`) Snakemake's
`--configfile` and `--config`, the same way in each.
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from typing import Any, Mapping, Sequence


def _flag_type(hint: Any) -> Any:
    """The type a flag's text converts to: `int | None` -> int."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(hint) if a is not type(None)]
        return options[0] if len(options) == 1 else str
    return hint


def add_fields(
    parser: argparse._ActionsContainer,
    cls: type,
    helps: Mapping[str, str],
    choices: Mapping[str, Sequence[Any]] | None = None,
) -> None:
    """One flag per field of `cls` that `helps` documents: typed by its annotation, defaulting
    to the class's default (required without one), a boolean as `--x/--no-x`."""
    hints = typing.get_type_hints(cls)
    for field in dataclasses.fields(cls):
        if field.name not in helps:
            continue
        required = field.default is dataclasses.MISSING
        default = None if required else field.default
        kwargs: dict[str, Any] = {"help": helps[field.name]}
        if default is not None:
            kwargs["help"] += " (default: %(default)s)"
        kind = _flag_type(hints[field.name])
        if kind is bool:
            kwargs["action"] = argparse.BooleanOptionalAction
        else:
            kwargs.update(type=kind, choices=(choices or {}).get(field.name))
        flag = "--" + field.name.replace("_", "-")
        parser.add_argument(flag, required=required, default=default, **kwargs)


def field_values(args: argparse.Namespace, cls: type) -> dict[str, Any]:
    """The parsed values of the fields of `cls` that have flags."""
    return {f.name: getattr(args, f.name) for f in dataclasses.fields(cls) if hasattr(args, f.name)}


def add_study_flags(parser: argparse.ArgumentParser, default_configfile: str | None = None) -> None:
    """`--configfile FILE...` and `--config KEY=VALUE...` as Snakemake takes them: each may be
    given more than once and with several values, and every value counts, in order
    (`nnperf.study.loading.load_study` reads them as the workflow does). `default_configfile`:
    the study file a verb reads when none is given, for the help."""
    default = f"; default: {default_configfile}" if default_configfile else ""
    parser.add_argument(
        "--configfile",
        nargs="+",
        action="extend",
        default=[],
        metavar="FILE",
        help=f"study files merged over config/config.yaml in order, as snakemake --configfile"
        f"{default}",
    )
    parser.add_argument(
        "--config",
        nargs="+",
        action="extend",
        default=[],
        metavar="KEY=VALUE",
        help="config values set last, as snakemake --config",
    )


MODEL_HELP = (
    "model name: an nnperf registry name, a torchvision classification model, timm_<timm "
    "name>, or any name with --model-factory (`nnperf models` lists them)"
)


def add_model_factory_flag(parser: argparse._ActionsContainer) -> None:
    """`--model-factory`: the user's own code for `--model`, as config `models:` takes it."""
    parser.add_argument(
        "--model-factory",
        metavar="FILE.py:CALLABLE",
        help="build --model with your own code: 'path/to/file.py:callable' or "
        "'package.module:callable', called with num_classes= (config `models:` "
        "{name, factory})",
    )


def model_source_of(args: argparse.Namespace):
    """The `ModelSource` that `--model-factory` describes for `--model`, or None."""
    if not getattr(args, "model_factory", None):
        return None
    from nnperf.core.model_names import check_model
    from nnperf.core.settings import ModelSource

    source = ModelSource(name=args.model, factory=args.model_factory)
    check_model(args.model, source, where="model")
    return source
