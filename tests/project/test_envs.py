"""The environments agree, and the pinned one installs where the README says it does.

`envs/requirements-cpu.txt` is one file for Linux and macOS: pins that only some platforms
need carry PEP 508 markers. The fast tests check the file's shape and its markers against
torch's own metadata and the other env files; the slow ones run pip's resolver on the whole
file for macOS arm64 and Linux x86_64/aarch64 without installing anything.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from conftest import REPO

ENVS = REPO / "envs"
CPU_PINS = ENVS / "requirements-cpu.txt"

# The CUDA runtime that PyPI's Linux torch requires; no macOS or Windows system needs it.
# torch's CUDA runtime. nvidia-ml-py is not part of it: nnperf's NVML reader, pure Python,
# useful with any torch build.
CUDA_RUNTIME = re.compile(r"^((?!nvidia-ml-py$)nvidia-.*|cuda-.*|triton)$")
# Published as an sdist only (pure Python); the resolver test builds it into a wheel first.
SDIST_ONLY = ("connection-pool",)


def marker_env(system: str, machine: str, python: str = "3.11") -> dict[str, str]:
    """The PEP 508 marker environment of a CPython `python` on `system`/`machine`."""
    return {
        "implementation_name": "cpython",
        "implementation_version": f"{python}.0",
        "os_name": "nt" if system == "Windows" else "posix",
        "platform_machine": machine,
        "platform_release": "",
        "platform_system": system,
        "platform_version": "",
        "python_full_version": f"{python}.0",
        "platform_python_implementation": "CPython",
        "python_version": python,
        "sys_platform": {"Linux": "linux", "Darwin": "darwin", "Windows": "win32"}[system],
    }


def manylinux(arch: str, glibc_minor: int = 28) -> list[str]:
    # pip does not widen manylinux_2_28 to the older glibc tags a 2.28 system also runs.
    tags = [f"manylinux_2_{minor}_{arch}" for minor in range(glibc_minor, 16, -1)]
    return tags + [f"manylinux2014_{arch}"]


# Platform name -> (pip --platform tags, marker environment), for CPython 3.11.
PLATFORMS = {
    "macos-arm64": (["macosx_14_0_arm64"], marker_env("Darwin", "arm64")),
    "linux-x86_64": (manylinux("x86_64"), marker_env("Linux", "x86_64")),
    "linux-aarch64": (manylinux("aarch64"), marker_env("Linux", "aarch64")),
}
# Marker environments the fast tests evaluate in: the platforms above, Windows, and a Python
# that torch's `python_version < "3.15"` markers tell apart.
MARKER_ENVS = {name: env for name, (_, env) in PLATFORMS.items()} | {
    "windows-amd64": marker_env("Windows", "AMD64"),
    "linux-x86_64-py3.15": marker_env("Linux", "x86_64", "3.15"),
    "macos-arm64-py3.15": marker_env("Darwin", "arm64", "3.15"),
}


def requirements(path: Path) -> dict[str, Requirement]:
    """The pins of a requirements file by canonical name; fails on anything but `name==version`."""
    result: dict[str, Requirement] = {}
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        line = line.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        requirement = Requirement(line)
        specifiers = list(requirement.specifier)
        where = f"{path.name}:{number}: {line!r}"
        exact = len(specifiers) == 1 and specifiers[0].operator == "=="
        assert exact, f"{where} is not name==version"
        name = canonicalize_name(requirement.name)
        assert name not in result, f"{where} pins {name} twice"
        result[name] = requirement
    return result


def pinned_version(requirement: Requirement) -> str:
    return next(iter(requirement.specifier)).version


def holds(marker: Marker | None, env: dict[str, str]) -> bool:
    return marker is None or marker.evaluate(env | {"extra": ""})


def applies(requirement: Requirement, env: dict[str, str]) -> bool:
    return holds(requirement.marker, env)


def same_marker(a: Marker | None, b: Marker | None) -> bool:
    """True when the two markers agree in every environment of MARKER_ENVS."""
    return all(holds(a, env) == holds(b, env) for env in MARKER_ENVS.values())


def test_every_line_is_an_exact_pin():
    pins = requirements(CPU_PINS)
    assert {"torch", "torchvision", "snakemake", "setuptools"} <= set(pins)
    assert pinned_version(pins["torch"]) == "2.14.1"


def test_cuda_runtime_pins_are_linux_only():
    pins = requirements(CPU_PINS)
    cuda = {name: pin for name, pin in pins.items() if CUDA_RUNTIME.match(name)}
    assert {"nvidia-cublas", "nvidia-cudnn-cu13", "cuda-toolkit", "triton"} <= set(cuda)
    for name, pin in cuda.items():
        for platform, env in MARKER_ENVS.items():
            if env["platform_system"] == "Linux" and env["python_version"] == "3.11":
                assert applies(pin, env), f"{name}: its marker leaves it out on {platform}"
            elif env["platform_system"] != "Linux":
                assert not applies(pin, env), f"{name} is pinned on {platform}: it needs a marker"


def test_cuda_runtime_pins_carry_torchs_markers():
    """Each pin torch requires on some platforms only carries torch's marker for it."""
    pins = requirements(CPU_PINS)
    try:
        installed = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("torch is not installed; its metadata is what the pins are checked against")
    if Version(installed) != Version(pinned_version(pins["torch"])):
        pytest.skip(f"installed torch {installed} is not the pinned one (a machine's own torch)")
    requires = [Requirement(line) for line in importlib.metadata.requires("torch") or []]
    conditional = [r for r in requires if r.marker is not None and "extra" not in str(r.marker)]
    assert conditional, "torch 2.14.1 declares platform-specific requirements; none were read"
    for requirement in conditional:
        name = canonicalize_name(requirement.name)
        assert name in pins, f"torch requires {name} ({requirement.marker}); it is not pinned"
        assert same_marker(pins[name].marker, requirement.marker), (
            f"{name}: pinned with marker {pins[name].marker}, torch requires it when "
            f"{requirement.marker}"
        )


def test_torch_free_pins_are_the_cpu_pins():
    cpu = requirements(CPU_PINS)
    report = requirements(ENVS / "requirements-report.txt")
    assert {"pandas", "matplotlib", "seaborn", "pyyaml", "jinja2", "pygments"} <= set(report)
    assert not {"torch", "torchvision"} & set(report)
    for name, pin in report.items():
        assert name in cpu, f"{name}: pinned for reports, not in requirements-cpu.txt"
        ours, theirs = pinned_version(pin), pinned_version(cpu[name])
        assert ours == theirs, f"{name}: report env pins {ours}, cpu pins {theirs}"
        agree = same_marker(pin.marker, cpu[name].marker)
        assert agree, f"{name}: report env marker {pin.marker}, cpu marker {cpu[name].marker}"


def test_pyproject_ranges_admit_the_pins_with_their_markers():
    """`pip install -e .` (loose ranges) and the pins agree on versions and platforms."""
    tomllib = pytest.importorskip("tomllib", reason="Python 3.10 has no tomllib")
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    pins = requirements(CPU_PINS)
    extras = project["optional-dependencies"]
    declared = project["dependencies"] + [line for lines in extras.values() for line in lines]
    for line in declared:
        requirement = Requirement(line)
        name = canonicalize_name(requirement.name)
        assert name in pins, f"pyproject.toml needs {name}; requirements-cpu.txt does not pin it"
        version = pinned_version(pins[name])
        assert requirement.specifier.contains(version), f"{line!r} excludes the pinned {version}"
        agree = same_marker(requirement.marker, pins[name].marker)
        assert agree, f"pyproject.toml {line!r} and the pin {pins[name]} disagree on platforms"


def test_conda_envs_install_the_pinned_pip_files():
    for env, requirements_file in (
        ("nnperf.yaml", "requirements-cpu.txt"),
        ("nnperf-report.yaml", "requirements-report.txt"),
    ):
        document = yaml.safe_load((ENVS / env).read_text())
        pip = next(d["pip"] for d in document["dependencies"] if isinstance(d, dict))
        assert pip == [f"-r {requirements_file}"], env
        assert (ENVS / requirements_file).is_file()


def test_every_rule_names_an_existing_conda_env():
    for rules in (REPO / "workflow" / "rules").glob("*.smk"):
        for env in re.findall(r'conda:\s*\n\s*"([^"]+)"', rules.read_text()):
            assert (rules.parent / env).resolve().is_file(), f"{rules.name}: {env}"


def make_commands(*args: str) -> list[str]:
    """The commands `make` would run to build a venv, one per line (continuations joined)."""
    # Run from `make test`, the outer make's flags (a jobserver, -n) must not reach this one.
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    result = subprocess.run(
        ["make", "--no-print-directory", "-n", "-B", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, f"make -n {' '.join(args)}:\n{result.stderr}"
    return result.stdout.replace("\\\n", " ").splitlines()


def test_cpu_torch_install_leaves_out_exactly_the_cuda_runtime(tmp_path):
    """`make TORCH_INDEX=...` keeps every pin but the CUDA runtime, with the same lines."""
    venv = tmp_path / "venv"
    default = make_commands(f"VENV={venv}", f"{venv}/.installed")
    assert any(c.endswith("pip install --quiet -r envs/requirements-cpu.txt") for c in default)
    assert not any("--extra-index-url" in c for c in default), "the default uses PyPI alone"

    index = "https://download.pytorch.org/whl/cpu"
    commands = make_commands(f"VENV={venv}", f"TORCH_INDEX={index}", f"{venv}/.installed")
    filters = [c for c in commands if c.startswith("grep ")]
    assert len(filters) == 1, commands
    venv.mkdir()
    subprocess.run(["bash", "-c", filters[0]], cwd=REPO, check=True)
    written = shlex.split(filters[0])[-1]
    kept = requirements(Path(written))
    install = [c for c in commands if f"-r {written}" in c]
    assert len(install) == 1 and f"--extra-index-url {index}" in install[0], commands

    pins = requirements(CPU_PINS)
    assert set(pins) - set(kept) == {name for name in pins if CUDA_RUNTIME.match(name)}
    assert all(str(kept[name]) == str(pins[name]) for name in kept)


# --- slow: pip's resolver for other platforms ------------------------------------------------

# pip evaluates markers for the running interpreter even with --platform (pypa/pip#11664), so
# a plain `pip install --dry-run --platform macosx_14_0_arm64` on Linux would still ask for the
# Linux-only pins. This runs pip with the target's marker environment instead; the report's
# "environment" field shows that it took.
# Where the index serves no PEP 658 metadata (the CI machine's PyPI proxy), fast-deps reads each
# wheel's METADATA over HTTP range requests, 10 KB at a time: ~15 requests a wheel, 80-100 s for
# macOS here. A 256 KB window needs ~6 (40 s), for ~10 MB more. Both patches are pip internals:
# the Makefile pins pip, and a pip that moves them fails this test with an AttributeError.
RESOLVE_FOR = """
import json, sys
import pip._vendor.packaging.markers as markers
target = json.loads(sys.argv[1])
markers.default_environment = lambda: dict(target)
from pip._internal.network.lazy_wheel import LazyZipOverHTTP
LazyZipOverHTTP.__init__.__defaults__ = (256 * 1024,)
from pip._internal.cli.main import main
sys.exit(main(sys.argv[2:]))
"""


NEEDS_PYPI = "(this needs PyPI; NNPERF_OFFLINE=1 skips it on a machine without a network)"


def pip_errors(stderr: str) -> str:
    lines = stderr.splitlines()
    return "\n".join([line for line in lines if line.startswith("ERROR:")] or lines[-20:])


@pytest.fixture(scope="module")
def resolved(tmp_path_factory) -> dict[str, tuple[subprocess.CompletedProcess, dict | None]]:
    """pip's dry-run resolution of requirements-cpu.txt for each platform, run side by side.

    Nothing is installed and no wheel is downloaded whole: pip reads each wheel's metadata
    (PEP 658 files where the index has them, HTTP range requests otherwise: fast-deps). On the
    CI machine the three take 40-65 s together and fetch ~50 MB each, mostly index pages.
    """
    if os.environ.get("NNPERF_OFFLINE") == "1":
        pytest.skip("NNPERF_OFFLINE=1: resolving the pins for other platforms needs PyPI")
    tmp = tmp_path_factory.mktemp("resolve")
    pins = requirements(CPU_PINS)
    wheels = tmp / "wheels"
    for name in SDIST_ONLY:
        build = subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
             "--no-binary=:all:", "--wheel-dir", str(wheels), str(pins[name])],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        if build.returncode != 0:
            message = f"building {pins[name]} from its sdist {NEEDS_PYPI}:\n"
            pytest.fail(message + pip_errors(build.stderr), pytrace=False)
    built = sorted(path.name for path in wheels.glob("*.whl"))
    pure = len(built) == len(SDIST_ONLY) and all(w.endswith("-py3-none-any.whl") for w in built)
    assert pure, f"{built}: an sdist-only pin must build to a pure-Python wheel (any platform)"

    processes = {}
    for name, (tags, env) in PLATFORMS.items():
        report = tmp / f"{name}.json"
        command = [
            sys.executable, "-c", RESOLVE_FOR, json.dumps(env),
            "install", "--dry-run", "--quiet", "--ignore-installed", "--only-binary=:all:",
            *(f"--platform={tag}" for tag in tags),
            "--python-version=3.11", "--implementation=cp", "--use-feature=fast-deps",
            f"--find-links={wheels}", f"--report={report}", "-r", str(CPU_PINS),
        ]  # fmt: skip
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        processes[name] = (process, report)
    result = {}
    for name, (process, report) in processes.items():
        stdout, stderr = process.communicate(timeout=600)
        completed = subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
        result[name] = (completed, json.loads(report.read_text()) if report.exists() else None)
    return result


@pytest.mark.slow
@pytest.mark.parametrize("platform", sorted(PLATFORMS))
def test_pins_resolve_on(platform, resolved):
    completed, report = resolved[platform]
    if completed.returncode != 0:
        message = f"pip cannot install the pins on {platform} {NEEDS_PYPI}:\n"
        pytest.fail(message + pip_errors(completed.stderr), pytrace=False)
    env = PLATFORMS[platform][1]
    assert report["environment"] == env, "pip evaluated markers for another platform"

    chosen = {
        canonicalize_name(i["metadata"]["name"]): i["metadata"]["version"]
        for i in report["install"]
    }
    pins = requirements(CPU_PINS)
    expected = {name: pinned_version(pin) for name, pin in pins.items() if applies(pin, env)}
    assert chosen == expected, (
        f"on {platform} pip would install, beyond or instead of the pins: "
        f"{ {n: v for n, v in chosen.items() if expected.get(n) != v} }; "
        f"pins it would leave out: { {n: v for n, v in expected.items() if chosen.get(n) != v} }"
    )
    assert chosen["torch"] == "2.14.1"
    cuda = sorted(name for name in chosen if CUDA_RUNTIME.match(name))
    if env["platform_system"] == "Linux":
        assert "nvidia-cudnn-cu13" in cuda and "triton" in cuda
    else:
        assert cuda == [], f"{platform} would get the CUDA runtime: {cuda}"
