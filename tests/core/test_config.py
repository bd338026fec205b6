"""Config validation: defaults, shorthands, one-line errors and the matrix."""

from __future__ import annotations

import copy

import pytest
import yaml

from nnperf.core import config as study_config
from nnperf.core.errors import NnperfError

from conftest import REPO


@pytest.fixture(scope="module")
def schema():
    return study_config.load_schema(REPO / "workflow/schemas/config.schema.yaml")


@pytest.fixture
def default_config():
    return yaml.safe_load((REPO / "config/config.yaml").read_text())


def error_of(config, schema) -> str:
    with pytest.raises(NnperfError) as info:
        study_config.validate(config, schema)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_empty_config_gets_every_default(schema):
    config = study_config.validate({}, schema)
    assert config["models"] == ["resnet18_cifar"]
    assert config["devices"] == ["cpu"]
    assert config["dataset"] == {
        "name": "synthetic", "source": None, "md5": None,
        "synthetic": {"train_images": 2048, "test_images": 256, "seed": 0},
        "path": None, "image_size": None, "label": None,
    }
    assert config["variants"]["baseline"]["channels_last"] is False
    assert config["variants"]["baseline"]["compile"] is False
    assert config["training"]["timed_steps"] == 20
    assert config["ncu"]["enabled"] == "auto"
    assert config["report"]["extra_results"] == []


def test_every_schema_key_has_description_and_default(schema):
    def walk(node, path):
        for name, spec in node.get("properties", {}).items():
            assert "description" in spec, f"{path}{name} lacks a description"
            assert "default" in spec, f"{path}{name} lacks a default"
            walk(spec, f"{path}{name}.")

    walk(schema, "")
    walk(schema["$defs"]["variant"], "variants.*.")


def test_default_config_is_valid(default_config, schema):
    config = study_config.validate(default_config, schema)
    assert config["variants"]["tuned"]["channels_last"] is True
    assert config["variants"]["tuned"]["num_workers"] == 0  # filled from the schema


def test_schema_model_names_are_path_keys_and_the_registry_is_named_without_torch(schema):
    from nnperf.core import layout, model_names
    from nnperf.workload import models

    string, mapping = schema["properties"]["models"]["items"]["oneOf"]
    assert string["pattern"] == mapping["properties"]["name"]["pattern"]
    assert string["pattern"] == f"^{layout.KEY_PATTERNS['model']}$"
    assert model_names.NAME_PATTERN.pattern == layout.KEY_PATTERNS["model"]
    assert model_names.REGISTRY_NAMES == models.MODEL_NAMES


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"models": ["resnet19"]}, "config models entry 'resnet19' is unknown (closest: resnet18"),
        ({"devices": ["tpu"]}, "config devices[0] = 'tpu' is not allowed; allowed: auto, cpu, cuda, mps"),
        ({"precisions": ["fp8"]}, "config precisions[0] = 'fp8' is not allowed; allowed: fp32, tf32, fp16, bf16"),
        ({"batch_sizes": [32, 0]}, "config batch_sizes[1] = 0 is too small; it must be >= 1"),
        ({"timing": {"min_processes": 0}}, "config timing.min_processes = 0 is too small; it must be >= 1"),
        ({"batch_size": [32]}, "config key 'batch_size' is not allowed at top level; allowed: study"),
        ({"training": {"timed_step": 3}}, "config key 'timed_step' is not allowed under 'training'; allowed: warmup_steps"),
        ({"variants": {"baseline": {}, "fast": {"channel_last": True}}}, "config key 'channel_last' is not allowed under 'variants.fast'"),
        ({"variants": {"baseline": {}, "fast": {"compile": "turbo"}}}, "config variants.fast.compile = 'turbo' is not allowed; allowed: false, default, reduce-overhead, max-autotune"),
        ({"dataset": {"name": "imagenet"}}, "config dataset.name = 'imagenet' is not allowed; allowed: synthetic, cifar10, cifar100"),
        ({"timing": {"max_processes": "three"}}, "config timing.max_processes = 'three' has the wrong type; expected integer"),
        ({"reps": 3}, "config key 'reps' is not allowed at top level"),
        ({"batch_sizes": [32, 32]}, "config batch_sizes lists a value twice"),
        ({"variants": {"tuned": {}}}, "config variants has no 'baseline'"),
        ({"ncu": {"enabled": "sometimes"}}, "config ncu.enabled = 'sometimes' is not allowed; allowed: auto, true, false"),
        ({"batch_sizes": [16, 4096]}, "config batch_sizes has 4096, more than the 1024 training images of dataset 'synthetic'"),
    ],
)
def test_bad_input_is_one_clear_line(default_config, schema, change, expected):
    config = copy.deepcopy(default_config)
    config.update(change)
    assert error_of(config, schema).startswith(expected)


@pytest.mark.parametrize(
    ("override", "key", "expected"),
    [
        ({"models": "resnet18_cifar,vgg16_cifar"}, "models", ["resnet18_cifar", "vgg16_cifar"]),
        ({"batch_sizes": 64}, "batch_sizes", [64]),
        ({"batch_sizes": "16,64"}, "batch_sizes", [16, 64]),
        ({"devices": "auto"}, "devices", ["auto"]),
        ({"ncu": "true"}, "ncu", {"enabled": True, "clock_control": "base", "warmup_steps": 10,
                                  "batch_sizes": None, "variants": None, "precisions": None}),
        ({"ncu": False}, "ncu", {"enabled": False, "clock_control": "base", "warmup_steps": 10,
                                 "batch_sizes": None, "variants": None, "precisions": None}),
        ({"dataset": "cifar10"}, "dataset", {"name": "cifar10", "source": None, "md5": None,
                                            "synthetic": {"train_images": 2048, "test_images": 256, "seed": 0},
                                            "path": None, "image_size": None, "label": None}),
    ],
)
def test_command_line_shorthands(schema, override, key, expected):
    assert study_config.validate(override, schema)[key] == expected


def test_matrix_leaves_out_impossible_pairs_with_a_note(schema):
    config = study_config.validate(
        {"devices": ["cpu", "cuda"], "precisions": ["fp32", "tf32"], "batch_sizes": [8, 16],
         "variants": {"baseline": {}, "tuned": {"channels_last": True}}},
        schema,
    )
    keys, notes = study_config.expand_matrix(config, detect=lambda: "cpu")
    # cuda: 2 precisions x 2 batch sizes x 2 variants; cpu: fp32 only x 2 x 2
    assert len(keys) == 2 * 2 * 2 + 1 * 2 * 2
    assert not any(k.device == "cpu" and k.precision == "tf32" for k in keys)
    assert notes == ["note: precision tf32 is left out on cpu (it cannot run there; cpu runs: fp32, bf16)"]


def test_auto_device_resolves_once(schema):
    config = study_config.validate({"devices": ["auto", "cuda"]}, schema)
    assert study_config.resolved_devices(config, detect=lambda: "cuda") == ["cuda"]
    assert study_config.resolved_devices(config, detect=lambda: "cpu") == ["cpu", "cuda"]


def test_check_runnable_names_the_pair():
    with pytest.raises(NnperfError, match="precision 'tf32' cannot run on device 'cpu'; allowed there: fp32, bf16"):
        study_config.check_runnable("cpu", "tf32")
    study_config.check_runnable("cuda", "tf32")


def test_config_mappings_keep_their_types(schema):
    """`--config 'training={timed_steps: 5, momentum: 0.0}'` arrives with string values
    (Snakemake parses mappings with YAML's BaseLoader); the schema's types are restored."""
    override = {"training": {"timed_steps": "5", "momentum": "0.0", "augment": "false"},
                "ncu": {"enabled": "true", "batch_sizes": ["256"]},
                "ceilings": {"bandwidth_bytes": "null"}}
    config = study_config.validate(override, schema)
    assert config["training"]["timed_steps"] == 5
    assert config["training"]["momentum"] == 0.0 and config["training"]["augment"] is False
    assert config["ncu"]["enabled"] is True and config["ncu"]["batch_sizes"] == [256]
    assert config["ceilings"]["bandwidth_bytes"] is None
    # A string that is no number stays a string, and the error still names the key.
    assert error_of({"training": {"timed_steps": "five"}}, schema) == (
        "config training.timed_steps = 'five' has the wrong type; expected integer"
    )
    # Where the schema wants a string, a number-like string stays a string.
    assert study_config.validate({"study": {"name": "2024"}}, schema)["study"]["name"] == "2024"


def test_a_study_file_defines_the_whole_matrix_it_names(default_config):
    """A --configfile that lists variants replaces config/config.yaml's; other mappings merge."""
    layer = {"variants": {"baseline": {}, "one_thread": {"cpu_threads": 1}},
             "training": {"timed_steps": 5}}
    merged = copy.deepcopy(default_config)
    merged["variants"].update(layer["variants"])  # what Snakemake's own merge gives
    merged["training"].update(layer["training"])
    study = study_config.overlay_study(merged, [layer, {}])
    assert list(study["variants"]) == ["baseline", "one_thread"]
    assert study["training"]["timed_steps"] == 5 and study["training"]["momentum"] == 0.9
    # A later layer (the --config mapping) wins; a layer without variants leaves them alone.
    later = study_config.overlay_study(merged, [layer, {"variants": {"baseline": {}}}])
    assert list(later["variants"]) == ["baseline"]
    assert list(study_config.overlay_study(merged, [{}])["variants"]) == list(merged["variants"])
