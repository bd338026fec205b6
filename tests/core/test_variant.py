"""Variant settings: defaults, validation messages, inline and file JSON."""

from __future__ import annotations

import json

import pytest

from nnperf.core.errors import NnperfError
from nnperf.core.variant import VariantSettings, load_variant_settings, parse_variant_settings


def test_empty_variant_is_plain_pytorch():
    settings = parse_variant_settings({})
    assert settings == VariantSettings()
    assert settings.to_dict() == {
        "channels_last": False,
        "cudnn_benchmark": False,
        "compile": False,
        "optimizer_impl": "default",
        "data_path": "dataloader",
        "num_workers": 0,
        "pin_memory": False,
        "prefetch_factor": None,
        "cpu_threads": None,
    }


def test_every_toggle_is_taken():
    raw = {
        "channels_last": True,
        "cudnn_benchmark": True,
        "compile": "max-autotune",
        "optimizer_impl": "fused",
        "data_path": "device_resident",
        "num_workers": 2,
        "pin_memory": True,
        "prefetch_factor": 4,
        "cpu_threads": 1,
    }
    assert parse_variant_settings(raw).to_dict() == raw


def test_schema_filled_variant_with_nulls_is_accepted():
    """What the workflow passes: every key present, compile false, nulls for defaults."""
    settings = parse_variant_settings(
        {"compile": False, "prefetch_factor": None, "cpu_threads": None}
    )
    assert settings.compile is False and settings.cpu_threads is None


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (
            {"channel_last": True},
            "variant setting 'channel_last' is unknown; allowed: channels_last",
        ),
        (
            {"compile": "fast"},
            "variant setting compile='fast' is not allowed; allowed: false, default, "
            "reduce-overhead, max-autotune",
        ),
        (
            {"optimizer_impl": "apex"},
            "variant setting optimizer_impl='apex' is not allowed; "
            "allowed: default, foreach, fused, for-loop",
        ),
        (
            {"data_path": "gpu"},
            "variant setting data_path='gpu' is not allowed; allowed: dataloader, "
            "device_resident",
        ),
        (
            {"channels_last": 1},
            "variant setting channels_last=1 is not allowed; allowed: true, false",
        ),
        (
            {"num_workers": -1},
            "variant setting num_workers=-1 is not allowed; allowed: an integer >= 0",
        ),
        (
            {"cpu_threads": 0},
            "variant setting cpu_threads=0 is not allowed; allowed: an integer >= 1 " "or null",
        ),
        ({"prefetch_factor": 2}, "variant setting prefetch_factor=2 needs num_workers > 0"),
    ],
)
def test_bad_settings_name_key_value_and_allowed(raw, message):
    with pytest.raises(NnperfError) as info:
        parse_variant_settings(raw)
    assert str(info.value).startswith(message)
    assert "\n" not in str(info.value)


def test_inline_json_and_file(tmp_path):
    assert load_variant_settings('{"channels_last": true}').channels_last is True
    path = tmp_path / "tuned.json"
    path.write_text(json.dumps({"optimizer_impl": "foreach"}))
    assert load_variant_settings(str(path)).optimizer_impl == "foreach"
    assert load_variant_settings(None) == VariantSettings()


def test_bad_json_names_the_source(tmp_path):
    with pytest.raises(NnperfError, match=r"^--variant-settings: not valid JSON"):
        load_variant_settings('{"channels_last": tru}')
    with pytest.raises(NnperfError, match="is neither a JSON object nor an existing file"):
        load_variant_settings(str(tmp_path / "missing.json"))
    path = tmp_path / "list.json"
    path.write_text("[1, 2]")
    with pytest.raises(NnperfError, match=r"list.json: must be a JSON object"):
        load_variant_settings(str(path))
