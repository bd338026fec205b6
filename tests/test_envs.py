"""The environments agree: conda files install the pip pins, the torch-free subset matches."""

from __future__ import annotations

import re

import yaml

from conftest import REPO

ENVS = REPO / "envs"


def pins(path) -> dict[str, str]:
    result = {}
    for line in path.read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9_.\-]+)==(\S+)$", line.strip())
        if match:
            result[match.group(1).lower().replace("_", "-")] = match.group(2)
    return result


def test_torch_free_pins_are_the_cpu_pins():
    cpu = pins(ENVS / "requirements-cpu.txt")
    report = pins(ENVS / "requirements-report.txt")
    assert {"pandas", "matplotlib", "seaborn", "pyyaml", "jinja2", "pygments"} <= set(report)
    assert not {"torch", "torchvision"} & set(report)
    for name, version in report.items():
        assert cpu.get(name) == version, f"{name}: report env pins {version}, cpu pins {cpu.get(name)}"


def test_conda_envs_install_the_pinned_pip_files():
    for env, requirements in (("nnperf.yaml", "requirements-cpu.txt"),
                              ("nnperf-report.yaml", "requirements-report.txt")):
        document = yaml.safe_load((ENVS / env).read_text())
        pip = next(d["pip"] for d in document["dependencies"] if isinstance(d, dict))
        assert pip == [f"-r {requirements}"], env
        assert (ENVS / requirements).is_file()


def test_every_rule_names_an_existing_conda_env():
    for rules in (REPO / "workflow" / "rules").glob("*.smk"):
        for env in re.findall(r'conda:\s*\n\s*"([^"]+)"', rules.read_text()):
            assert (rules.parent / env).resolve().is_file(), f"{rules.name}: {env}"
