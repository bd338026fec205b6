"""The study config: validation with one-line errors, defaults, and the run matrix.

The workflow calls this while Snakemake builds the DAG, so it must be cheap (no torch
import) and its errors must read as one line naming the key, the value and what is allowed:
jsonschema's own messages dump the whole schema and instance, which is unreadable for a
typo in a YAML file.

It is not the place for anything a job does; it only decides *what* runs.
"""

from __future__ import annotations

import copy
import itertools
import math
import os
from pathlib import Path
from typing import Any, Callable, Iterable

import jsonschema
import yaml

from nnperf.core import devices, model_names, vocab
from nnperf.core.errors import NnperfError

# The key of one configuration; `config.RunKey` is where the matrix's users have found it.
from nnperf.core.keys import RunKey
from nnperf.core.settings import SCHEMA_PATH

# Keys that users set with `--config key=value` and that arrive as a scalar or a
# comma-separated string instead of a YAML list.
LIST_KEYS = ("models", "devices", "precisions", "batch_sizes")


def load_schema(path: str | Path = SCHEMA_PATH) -> dict:
    with open(path, encoding="utf-8") as handle:
        return yaml.safe_load(handle)


# Sections a study file replaces whole instead of merging into config/config.yaml's: the
# matrix. (Snakemake already replaces lists; a mapping it would merge key by key.)
REPLACED_SECTIONS = ("variants", "recipes")


def overlay_study(config: dict, layers: Iterable[dict]) -> dict:
    """`config` (Snakemake's merge of config/config.yaml, every `--configfile` and `--config`)
    with each section of REPLACED_SECTIONS taken whole from the last layer that names it.

    So a study file given with `--configfile` defines the whole matrix it names: a variant
    of config/config.yaml that it does not list does not run. `layers` are the
    `--configfile` documents in order, then the `--config` mapping.
    """
    result = dict(config)
    for layer in layers:
        for section in REPLACED_SECTIONS:
            if isinstance(layer, dict) and section in layer:
                result[section] = copy.deepcopy(layer[section])
    return result


def _coerce(value: Any, schema: dict, defs: dict) -> Any:
    """Strings where the schema wants a number, boolean or null, parsed as YAML.

    Snakemake parses a `--config key={a: 5}` mapping with YAML's BaseLoader, which keeps every
    value inside it a string ("5"); this restores the types the schema asks for, so
    `--config 'training={timed_steps: 5}'` means 5. Anything that does not parse to an
    allowed type is left for the validator to report.
    """
    if "$ref" in schema:
        schema = defs[schema["$ref"].rsplit("/", 1)[-1]]
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        return {
            key: _coerce(item, properties.get(key, extra if isinstance(extra, dict) else {}), defs)
            for key, item in value.items()
        }
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [_coerce(item, schema["items"], defs) for item in value]
    if not isinstance(value, str):
        return value
    wanted = schema.get("type")
    wanted = set(wanted) if isinstance(wanted, list) else {wanted} if wanted else set()
    enum = schema.get("enum")
    if "string" in wanted or (enum and value in enum):
        return value
    try:
        parsed = yaml.safe_load(value)
    except yaml.YAMLError:
        return value
    kinds = {
        "integer": isinstance(parsed, int) and not isinstance(parsed, bool),
        "number": isinstance(parsed, (int, float)) and not isinstance(parsed, bool),
        "boolean": isinstance(parsed, bool),
        "null": parsed is None,
    }
    if any(kinds.get(kind) for kind in wanted) or (enum and parsed in enum):
        return parsed
    return value


def normalise(config: dict, schema: dict | None = None) -> dict:
    """Accept the shorthands of the command line before validation.

    `--config models=resnet18_cifar,vgg16_cifar` gives a string, `--config batch_sizes=64`
    an int and `--config dataset=cifar10` a string where the schema wants a list or a
    mapping; turn those into the documented shapes so overrides work for the common keys.
    """
    result = dict(config)
    if schema is not None:
        result = _coerce(result, schema, schema.get("$defs", {}))
    for key in LIST_KEYS:
        value = result.get(key)
        if isinstance(value, str):
            items = [part.strip() for part in value.split(",") if part.strip()]
            result[key] = [int(v) if key == "batch_sizes" and v.isdigit() else v for v in items]
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            result[key] = [value]
    if isinstance(result.get("dataset"), str):
        result["dataset"] = {"name": result["dataset"]}
    if isinstance(result.get("ncu"), (bool, str)):
        result["ncu"] = {"enabled": result["ncu"]}
    ncu = result.get("ncu")
    if isinstance(ncu, dict) and isinstance(ncu.get("enabled"), str):
        # `--config ncu=true` may arrive as the string "true".
        words = {"true": True, "false": False}
        result["ncu"] = {**ncu, "enabled": words.get(ncu["enabled"].lower(), ncu["enabled"])}
    return result


def _with_defaults(validator_class):
    """jsonschema validator that fills `default:` values in while it validates.

    This is the recipe from jsonschema's FAQ ("Why doesn't my schema's default property set
    the default on my instance?"), which is also what snakemake.utils.validate does; it is
    repeated here because the workflow needs the errors in a different shape.
    """
    validate_properties = validator_class.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for name, subschema in properties.items():
                if "default" in subschema and name not in instance:
                    # A deep copy: a shallow one would let defaults filled into a nested
                    # mapping (`variants: {baseline: {}}`) write into the schema itself.
                    instance[name] = copy.deepcopy(subschema["default"])
        yield from validate_properties(validator, properties, instance, schema)

    return jsonschema.validators.extend(validator_class, {"properties": set_defaults})


def _key_path(error: jsonschema.ValidationError) -> str:
    parts = []
    for part in error.absolute_path:
        if isinstance(part, int):
            parts.append(f"[{part}]")
        else:
            parts.append(f".{part}" if parts else str(part))
    return "".join(parts) or "(top level)"


def _allowed(schema: dict) -> str:
    if "enum" in schema:
        return ", ".join(
            "false" if v is False else "true" if v is True else str(v) for v in schema["enum"]
        )
    if "properties" in schema:
        return ", ".join(schema["properties"])
    return ""


def format_error(error: jsonschema.ValidationError) -> str:
    """One line: which key, which value, what is allowed."""
    key = _key_path(error)
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        allowed = set(error.schema.get("properties", {}))
        unknown = sorted(k for k in error.instance if k not in allowed)
        where = "at top level" if key == "(top level)" else f"under '{key}'"
        return (
            f"config key '{unknown[0]}' is not allowed {where}; "
            f"allowed: {', '.join(error.schema.get('properties', {}))}"
        )
    if error.validator == "enum":
        return (
            f"config {key} = {error.instance!r} is not allowed; allowed: {_allowed(error.schema)}"
        )
    if error.validator in ("minimum", "exclusiveMinimum"):
        bound = error.validator_value
        relation = ">=" if error.validator == "minimum" else ">"
        return f"config {key} = {error.instance!r} is too small; it must be {relation} {bound}"
    if error.validator in ("maximum", "exclusiveMaximum"):
        bound = error.validator_value
        relation = "<=" if error.validator == "maximum" else "<"
        return f"config {key} = {error.instance!r} is too large; it must be {relation} {bound}"
    if error.validator == "type":
        wanted = error.validator_value
        wanted = " or ".join(wanted) if isinstance(wanted, list) else wanted
        return f"config {key} = {error.instance!r} has the wrong type; expected {wanted}"
    if error.validator == "pattern":
        return (
            f"config {key} = {error.instance!r} is not allowed; allowed: text matching "
            f"{error.validator_value} (a name in result paths)"
        )
    if error.validator == "uniqueItems":
        return f"config {key} lists a value twice: {error.instance!r}"
    if error.validator == "minItems":
        return f"config {key} is empty; give at least {error.validator_value} value"
    if error.validator == "propertyNames":
        return (
            f"config {key}: name {error.instance!r} is not allowed; use lower-case letters, "
            "digits and underscores, starting with a letter"
        )
    return f"config {key} = {error.instance!r}: {error.message}"


def validate(config: dict, schema: dict | None = None, machine_cores: int | None = None) -> dict:
    """Return a validated copy of `config` with every default filled in.

    Raises NnperfError with one line for the first problem found. `machine_cores` bounds
    `cpu_threads` (default: `cpu_cores()`, this machine's).
    """
    schema = schema if schema is not None else load_schema()
    instance = normalise(config, schema)
    check_finite(instance)
    validator_class = _with_defaults(jsonschema.Draft202012Validator)
    validator = validator_class(schema)
    errors = sorted(validator.iter_errors(instance), key=lambda e: list(e.absolute_path))
    if errors:
        # jsonschema reports the deepest, most specific problem best_match finds.
        raise NnperfError(format_error(jsonschema.exceptions.best_match(errors)))
    # Variants and recipes are open mappings (additionalProperties), which the defaults
    # recipe does not descend into; fill each entry's settings explicitly.
    for section, definition in (("variants", "variant"), ("recipes", "recipe")):
        fields = schema["$defs"][definition]["properties"]
        instance[section] = {
            name: {key: spec["default"] for key, spec in fields.items()} | dict(settings or {})
            for name, settings in instance[section].items()
        }
    # An ImageFolder's images are counted where its folder is listed (nnperf.study.scope).
    train_images = _train_images(instance["dataset"])
    too_large = [b for b in instance["batch_sizes"] if b > train_images]
    if too_large:
        raise NnperfError(
            f"config batch_sizes has {too_large[0]}, more than the {train_images} training "
            f"images of dataset {instance['dataset']['name']!r}; a batch cannot be larger "
            "than the training set (raise dataset.synthetic.train_images or lower the batch size)"
        )
    if vocab.REFERENCE_VARIANT not in instance["variants"]:
        raise NnperfError(
            "config variants has no 'baseline'; it is the reference every speedup is measured "
            f"against (variants given: {', '.join(instance['variants'])})"
        )
    check_cpu_threads(instance["variants"], machine_cores or cpu_cores())
    model_names.check_models(instance["models"])
    return instance


def _yaml_spelling(value: float) -> str:
    """How YAML writes a non-finite number, so the message shows what the file says."""
    if math.isnan(value):
        return ".nan"
    return ".inf" if value > 0 else "-.inf"


def _non_finite(value: Any, key: str) -> tuple[str, float] | None:
    """The dotted key and value of the first NaN or infinity inside `value`, or None."""
    if isinstance(value, float) and not math.isfinite(value):
        return key, value
    if isinstance(value, dict):
        items = ((f"{key}.{name}" if key else str(name), item) for name, item in value.items())
    elif isinstance(value, (list, tuple)):
        items = ((f"{key}[{index}]", item) for index, item in enumerate(value))
    else:
        return None
    for where, item in items:
        found = _non_finite(item, where)
        if found:
            return found
    return None


def check_finite(config: dict) -> None:
    """Refuse NaN and infinities anywhere in `config`, with one line naming the key.

    YAML spells them `.nan`, `.inf` and `-.inf` (and `1.0e+400` overflows to infinity), and a
    JSON schema cannot refuse them: every comparison with NaN is false, so `.nan` passes
    `exclusiveMinimum: 0`, and `.inf` passes every bound below it. No setting of a study
    means anything as a non-finite number (a budget of NaN seconds is a typo, not "no
    limit": null says that).
    """
    found = _non_finite(config, "")
    if found:
        key, value = found
        raise NnperfError(
            f"config {key} = {_yaml_spelling(value)} is not a finite number; "
            "allowed: a finite number (or null where the key takes null)"
        )


def cpu_cores() -> int:
    """CPU cores of this machine: what `torch.set_num_threads` can usefully be given.

    All of the machine's cores (`os.cpu_count()`), not only those this process may run on
    (`os.sched_getaffinity`): Snakemake may build the DAG inside a narrower CPU set than its
    jobs get (a login node's cgroup, `taskset`), and the bound is there to catch a typo
    (100000 threads, which libgomp fails to allocate), not to second-guess a pinning.
    """
    return os.cpu_count() or 1


def check_cpu_threads(variants: dict, cores: int) -> None:
    """Refuse a variant's `cpu_threads` above this machine's `cores`, with one line.

    More threads than cores only oversubscribes them, and an absurd count (100000) makes
    libgomp fail to allocate its thread pool inside the worker, which ends without a result
    far from the typo; so it is refused while the DAG is built.
    """
    for name, settings in variants.items():
        threads = (settings or {}).get("cpu_threads")
        if threads is not None and threads > cores:
            raise NnperfError(
                f"config variants.{name}.cpu_threads = {threads} is more than the {cores} CPU "
                f"cores of this machine; allowed: 1 to {cores}, or null for torch's default"
            )


# Training images of the real datasets (CIFAR-10 and CIFAR-100 both have 50,000).
CIFAR_TRAIN_IMAGES = 50_000


def _train_images(dataset: dict) -> float:
    if dataset["name"] == "synthetic":
        return dataset["synthetic"]["train_images"]
    if dataset["name"] == vocab.IMAGEFOLDER:
        return math.inf
    return CIFAR_TRAIN_IMAGES


def resolved_devices(
    config: dict, detect: Callable[[], str] = devices.detect_best_device
) -> list[str]:
    """Devices of the study with `auto` replaced by the best device here, without repeats."""
    result: list[str] = []
    for name in config["devices"]:
        concrete = detect() if name == "auto" else name
        if concrete not in result:
            result.append(concrete)
    return result


def expand_matrix(
    config: dict, detect: Callable[[], str] = devices.detect_best_device
) -> tuple[list[RunKey], list[str]]:
    """All runnable configurations, and one note per device/precision pair left out."""
    keys: list[RunKey] = []
    notes: list[str] = []
    for device, precision in itertools.product(
        resolved_devices(config, detect), config["precisions"]
    ):
        if not vocab.supports(device, precision):
            allowed = ", ".join(vocab.SUPPORTED_PRECISIONS[device])
            notes.append(
                f"note: precision {precision} is left out on {device} "
                f"(it cannot run there; {device} runs: {allowed})"
            )
            continue
        for model, batch_size, variant in itertools.product(
            model_keys(config), config["batch_sizes"], config["variants"]
        ):
            keys.append(RunKey(device, model, precision, int(batch_size), variant))
    return sorted(keys), notes


def model_keys(config: dict) -> list[str]:
    """The names of config `models:`, whose entries are names or mappings with a name."""
    return [entry if isinstance(entry, str) else entry["name"] for entry in config["models"]]


def empty_matrix_message(matrix: list, notes: list[str]) -> str | None:
    """One line saying why a study has nothing to measure, or None when it has something.

    The workflow then asks for no output at all: a table rebuilt from zero runs would replace
    the finished one on disk with nothing.
    """
    if matrix:
        return None
    reasons = "; ".join(note.removeprefix("note: ") for note in notes) or "no configuration"
    return (
        f"nothing to measure: the matrix of models x devices x precisions x batch sizes x "
        f"variants is empty ({reasons}); no job runs and every earlier result stays as it is"
    )


def check_runnable(device: str, precision: str) -> None:
    """Raise a clear error for a path that names a combination that can never run."""
    if not vocab.supports(device, precision):
        allowed = ", ".join(vocab.SUPPORTED_PRECISIONS.get(device, ()))
        raise NnperfError(
            f"precision {precision!r} cannot run on device {device!r}; allowed there: {allowed}"
        )


def unique(values: Iterable[Any]) -> list[Any]:
    """Values in first-seen order without repeats."""
    return list(dict.fromkeys(values))
