"""`nnperf doctor` and the workflow's preflight: each check on made-up machine reports, fake
`ncu` and `nvidia-smi` executables for the processes, and the real command on this machine."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, TINY_CONFIG, run_snakemake, snakemake_env

from nnperf import cli
from nnperf.core import devices
from nnperf.core.errors import NnperfError
from nnperf.ncu import command as profiling
from nnperf.ncu import metrics as ncu
from nnperf.study import preflight, session
from nnperf.study import loading as study
from nnperf.study.preflight import (
    FAILED,
    MISSING,
    NCU_IF_FOUND,
    NCU_NO,
    NCU_REQUIRED,
    NOT_NEEDED,
    OK,
    Facts,
    Needs,
    SmiFacts,
    TorchFacts,
)

CUDA_TORCH = TorchFacts(version="2.14.1+cu130", cuda_build="13.0")
CPU_TORCH = TorchFacts(version="2.14.1+cpu")
GPU_HERE = TorchFacts(
    version="2.14.1+cu130",
    cuda_build="13.0",
    cuda_available=True,
    device_count=1,
    device_name="NVIDIA H100 80GB HBM3",
)
CHECK_NAMES = ["torch", "driver", "cuda", "ncu", "ncu-counters", "nvml"]
CUDA_STUDY = Needs(cuda=True, ncu=NCU_IF_FOUND, devices=("cuda",))
CPU_STUDY = Needs(cuda=False, ncu=NCU_NO, devices=("cpu",))
NO_DRIVER = devices.absent_reason("cuda") or "device 'cuda' is not available on this machine"
# The header of `nvidia-smi` on an H100 machine (driver 580, CUDA 13.0).
SMI_HEADER = """\
Tue Nov 25 10:12:03 2026
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 580.95.05              Driver Version: 580.95.05      CUDA Version: 13.0     |
+-----------------------------------------+------------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |
"""
PERM_OUTPUT = (
    "==PROF== Connected to process 4242 (/usr/bin/python3.11)\n"
    "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU "
    "Performance Counters on the target device 0. For instructions on enabling permissions and "
    "to get more information see https://developer.nvidia.com/ERR_NVGPUCTRPERM\n"
    "==PROF== Disconnected from process 4242\n"
)
GOOD_OUTPUT = (
    "==PROF== Connected to process 4242 (/usr/bin/python3.11)\n"
    '==PROF== Profiling "vectorized_elementwise_kernel" - 0: 0%....50%....100% - 1 pass\n'
    "==PROF== Disconnected from process 4242\n"
    "[4242] python3.11@127.0.0.1\n"
    "  void at::native::vectorized_elementwise_kernel<4, ...>(int, T2, T3) (1, 1, 1)x(128, 1, 1)\n"
    "    Section: Command line profiler metrics\n"
    "    ---------------------- ----------- ------------\n"
    "    Metric Name            Metric Unit Metric Value\n"
    "    ---------------------- ----------- ------------\n"
    "    sm__cycles_elapsed.avg       cycle        2,816\n"
)


def facts(**changes) -> Facts:
    """A GPU machine with everything a CUDA study needs, changed by `changes`."""
    base = dict(
        absent=None,
        torch=GPU_HERE,
        smi=preflight.parse_nvidia_smi(SMI_HEADER),
        ncu="/usr/local/cuda/bin/ncu",
        ncu_version="Version 2025.3.1.0",
    )
    return Facts(**{**base, **changes})


def by_name(checks):
    return {check.name: check for check in checks}


def write_executable(folder: Path, name: str, body: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(f"#!{sys.executable}\n{body}")
    path.chmod(0o755)
    return path


# --- what a study needs -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "devices_, enabled, cuda, mode",
    [
        (("cpu",), "auto", False, NCU_NO),
        (("cpu",), True, False, NCU_NO),
        (("cuda",), "auto", True, NCU_IF_FOUND),
        (("cuda",), True, True, NCU_REQUIRED),
        (("cuda", "cpu"), False, True, NCU_NO),
    ],
)
def test_needs_come_from_the_devices_and_ncu_enabled(devices_, enabled, cuda, mode):
    needs = preflight.needs_of(devices_, enabled)
    assert (needs.cuda, needs.ncu, needs.devices) == (cuda, mode, devices_)


# --- torch's build, the driver, the device ---------------------------------------------------


def test_a_cpu_only_torch_fails_a_cuda_study_with_the_install_fix():
    check = preflight.check_torch(CPU_TORCH, CUDA_STUDY)
    assert (check.status, check.problem) == (MISSING, True)
    assert check.line() == (
        "doctor: torch: torch 2.14.1+cpu is a CPU-only build (torch.version.cuda is None); fix: "
        + preflight.TORCH_FIX
    )
    assert "install a CUDA build of torch" in check.line()


def test_a_cpu_only_torch_is_only_a_remark_for_a_cpu_study():
    check = preflight.check_torch(CPU_TORCH, CPU_STUDY)
    assert not check.problem
    assert check.line() == (
        "doctor: torch: torch 2.14.1+cpu is a CPU-only build (torch.version.cuda is None) "
        "(not needed: the study runs on cpu)"
    )


def test_torch_built_for_cuda_is_ok():
    check = preflight.check_torch(CUDA_TORCH, CUDA_STUDY)
    assert (check.status, check.line()) == (
        OK,
        "doctor: torch: torch 2.14.1+cu130, built for CUDA 13.0",
    )


def test_nvidia_smi_header_gives_driver_and_cuda_version():
    assert preflight.parse_nvidia_smi(SMI_HEADER) == SmiFacts("580.95.05", "13.0")
    assert preflight.parse_nvidia_smi("no header here") == SmiFacts(None, None)


def test_a_driver_of_an_older_cuda_major_than_torch_fails_with_both_versions():
    old = SmiFacts("535.104.05", "12.2")
    check = preflight.check_driver(None, old, CUDA_TORCH, CUDA_STUDY)
    assert (check.status, check.problem) == (FAILED, True)
    assert check.line().startswith(
        "doctor: driver: driver 535.104.05, supports CUDA up to 12.2, older than torch's CUDA "
        "13.0 build; fix: update the NVIDIA driver to one for CUDA 13.0 or newer, or install a "
        "torch built for CUDA 12.2 or older"
    )


def test_an_older_minor_version_runs_by_minor_version_compatibility():
    check = preflight.check_driver(
        None, SmiFacts("570.1", "12.8"), TorchFacts("2.9", "12.9"), CUDA_STUDY
    )
    assert check.status == OK and not check.problem
    assert (
        "older than torch's CUDA 12.9 build: it runs by CUDA minor-version compatibility"
        in check.text
    )


def test_a_driver_as_new_as_torch_is_ok():
    check = preflight.check_driver(None, SmiFacts("580.95.05", "13.0"), CUDA_TORCH, CUDA_STUDY)
    assert check.line() == (
        "doctor: driver: driver 580.95.05, supports CUDA up to 13.0; torch is built for CUDA 13.0"
    )


def test_no_driver_is_missing_for_a_cuda_study_and_a_remark_for_a_cpu_study():
    needed = preflight.check_driver(NO_DRIVER, None, CUDA_TORCH, CUDA_STUDY)
    assert needed.problem and "fix: run the study on a machine with an NVIDIA GPU" in needed.line()
    remark = preflight.check_driver(NO_DRIVER, None, CUDA_TORCH, CPU_STUDY)
    assert not remark.problem
    assert remark.line().endswith("(not needed: the study runs on cpu)")
    assert "fix:" not in remark.line()


def test_a_failing_nvidia_smi_is_a_driver_failure():
    smi = SmiFacts(
        error="NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
    )
    check = preflight.check_driver(None, smi, CUDA_TORCH, CUDA_STUDY)
    assert check.status == FAILED
    assert check.text == (
        "nvidia-smi fails: NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA "
        "driver."
    )


def test_no_cuda_device_says_why():
    absent = preflight.check_cuda(NO_DRIVER, CUDA_TORCH, CUDA_STUDY)
    assert absent.line() == f"doctor: cuda: no CUDA device: {NO_DRIVER}"
    assert absent.problem
    cpu_build = preflight.check_cuda(None, CPU_TORCH, CUDA_STUDY)
    assert cpu_build.status == FAILED
    assert cpu_build.text == (
        "no CUDA device: a GPU driver is here, but torch 2.14.1+cpu is a CPU-only build"
    )
    assert cpu_build.fix == preflight.TORCH_FIX


def test_a_hidden_gpu_names_cuda_visible_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    check = preflight.check_cuda(None, CUDA_TORCH, CUDA_STUDY)
    assert check.text == (
        "no CUDA device: a GPU driver is here, but torch.cuda.is_available() is False with "
        "CUDA_VISIBLE_DEVICES=''"
    )


def test_a_cuda_device_is_named():
    check = preflight.check_cuda(None, GPU_HERE, CUDA_STUDY)
    assert check.line() == "doctor: cuda: 1 CUDA device(s): NVIDIA H100 80GB HBM3"


# --- ncu and its counters ----------------------------------------------------------------------


def test_ncu_auto_without_ncu_is_one_note_not_a_failure():
    check = preflight.check_ncu(None, CUDA_STUDY)
    assert not check.problem
    assert check.text == ncu.ncu_exclusion_reason("auto", "cuda", False)
    assert "no Nsight Compute profiles" in check.text and "/usr/local/cuda/bin" in check.text


def test_ncu_true_without_ncu_fails_with_the_install_fix():
    needs = Needs(cuda=True, ncu=NCU_REQUIRED, devices=("cuda",))
    check = preflight.check_ncu(None, needs)
    assert check.problem
    assert check.line() == (
        "doctor: ncu: ncu.enabled is true, but there is no ncu on PATH, /usr/local/cuda/bin, "
        "/usr/local/cuda-*/bin, /opt/nvidia/nsight-compute/*; fix: install Nsight Compute (it "
        "comes with the CUDA toolkit; developer.nvidia.com/nsight-compute) and put its folder "
        "on PATH, or set ncu.enabled: false"
    )


def test_ncu_disabled_is_not_needed():
    check = preflight.check_ncu(None, Needs(cuda=True, ncu=NCU_NO, devices=("cuda",)))
    assert (check.status, check.text) == (
        NOT_NEEDED,
        "ncu.enabled is false: no Nsight Compute profiles",
    )


@pytest.fixture
def fake_ncu(tmp_path, monkeypatch):
    """An `ncu` on PATH that records its argv and prints $FAKE_NCU_OUTPUT."""
    bin_dir = tmp_path / "bin"
    write_executable(
        bin_dir,
        "ncu",
        "import json, os, sys\n"
        "open(os.environ['FAKE_NCU_ARGV'], 'w').write(json.dumps(sys.argv[1:]))\n"
        "sys.stdout.write(os.environ['FAKE_NCU_OUTPUT'])\n"
        "sys.exit(int(os.environ.get('FAKE_NCU_STATUS', '0')))\n",
    )
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_NCU_ARGV", str(tmp_path / "argv.json"))
    return tmp_path


def test_counters_denied_is_one_line_with_the_modprobe_fix(fake_ncu, monkeypatch):
    monkeypatch.setenv("FAKE_NCU_OUTPUT", PERM_OUTPUT)
    found = profiling.find_ncu()
    assert found == str(fake_ncu / "bin" / "ncu")
    check = preflight.check_counters(found, GPU_HERE, CUDA_STUDY)
    assert (check.status, check.problem) == (FAILED, True)
    line = check.line()
    assert "\n" not in line
    assert line.startswith(
        "doctor: ncu-counters: ncu may not read the GPU's performance counters "
        "(ERR_NVGPUCTRPERM: the driver restricts them to admin users); fix: "
    )
    assert "sudo modprobe nvidia NVreg_RestrictProfilingToAdminUsers=0" in line
    assert "/etc/modprobe.d/" in line and "run the study as root" in line
    assert "https://developer.nvidia.com/ERR_NVGPUCTRPERM" in line
    # The probe: one metric of one tiny CUDA op in this interpreter.
    argv = json.loads((fake_ncu / "argv.json").read_text())
    assert argv == [
        "--metrics",
        "sm__cycles_elapsed.avg",
        "--launch-count",
        "1",
        "--target-processes",
        "all",
        sys.executable,
        "-c",
        preflight.PROBE_OP,
    ]


def test_counters_readable_is_ok(fake_ncu, monkeypatch):
    monkeypatch.setenv("FAKE_NCU_OUTPUT", GOOD_OUTPUT)
    check = preflight.check_counters(profiling.find_ncu(), GPU_HERE, CUDA_STUDY)
    assert check.line() == (
        "doctor: ncu-counters: ncu reads the GPU's performance counters (sm__cycles_elapsed.avg)"
    )


@pytest.mark.parametrize(
    "output, status, text",
    [
        (
            "==PROF== Connected\n==WARNING== No kernels were profiled.\n",
            0,
            "ncu profiled no kernel of a tiny CUDA op",
        ),
        (
            "==ERROR== Failed to prepare kernel for profiling\n",
            0,
            "ncu could not profile a tiny CUDA op: ==ERROR== Failed to prepare kernel for profiling",
        ),
        (
            "RuntimeError: CUDA error\n",
            1,
            "ncu exited with status 1 profiling a tiny CUDA op: RuntimeError: CUDA error",
        ),
        (
            "==PROF== Disconnected\n",
            0,
            "ncu printed no sm__cycles_elapsed.avg value for a tiny CUDA op",
        ),
    ],
)
def test_other_probe_failures_say_what_ncu_said(fake_ncu, monkeypatch, output, status, text):
    monkeypatch.setenv("FAKE_NCU_OUTPUT", output)
    monkeypatch.setenv("FAKE_NCU_STATUS", str(status))
    check = preflight.check_counters(profiling.find_ncu(), GPU_HERE, CUDA_STUDY)
    assert (check.status, check.text) == (FAILED, text)
    assert check.fix.startswith("run it by hand to see why: ")


def test_a_probe_that_hangs_is_a_failure():
    check = preflight.check_counters("/x/ncu", GPU_HERE, CUDA_STUDY, probe=lambda argv: (None, ""))
    assert check.text == f"ncu did not profile one kernel in {preflight.PROBE_TIMEOUT_S} s"


def test_counters_are_not_tried_without_ncu_a_device_or_a_need():
    never = lambda argv: pytest.fail("the probe must not run")  # noqa: E731
    assert preflight.check_counters(None, GPU_HERE, CUDA_STUDY, never).text == "not tried: no ncu"
    no_gpu = preflight.check_counters("/x/ncu", CUDA_TORCH, CUDA_STUDY, never)
    assert (no_gpu.status, no_gpu.text) == (NOT_NEEDED, "not tried: no CUDA device to profile")
    cpu = preflight.check_counters("/x/ncu", GPU_HERE, CPU_STUDY, never)
    assert not cpu.problem and cpu.status == NOT_NEEDED


def test_find_ncu_looks_in_the_install_folders_newest_first(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    for version in ("12.4", "12.10", "11.8"):
        write_executable(tmp_path / f"cuda-{version}" / "bin", "ncu", "")
    (tmp_path / "cuda-13.0" / "bin").mkdir(parents=True)
    (tmp_path / "cuda-13.0" / "bin" / "ncu").write_text("not executable")
    search = (str(tmp_path / "cuda" / "bin" / "ncu"), str(tmp_path / "cuda-*" / "bin" / "ncu"))
    assert profiling.find_ncu(search=search) == str(tmp_path / "cuda-12.10" / "bin" / "ncu")
    # The default folder wins over versioned ones; an explicit name is not searched for.
    write_executable(tmp_path / "cuda" / "bin", "ncu", "")
    assert profiling.find_ncu(search=search) == str(tmp_path / "cuda" / "bin" / "ncu")
    assert profiling.find_ncu("ncu-2025", search=search) is None
    # PATH first.
    on_path = write_executable(tmp_path / "onpath", "ncu", "")
    monkeypatch.setenv("PATH", str(on_path.parent))
    assert profiling.find_ncu(search=search) == str(on_path)


def test_require_ncu_names_where_it_looked(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    if profiling.find_ncu() is not None:
        pytest.skip("this machine has ncu in an install folder")
    with pytest.raises(NnperfError) as error:
        profiling.require_ncu("ncu")
    assert str(error.value).startswith(
        "ncu executable 'ncu' not found on PATH, /usr/local/cuda/bin, /usr/local/cuda-*/bin, "
        "/opt/nvidia/nsight-compute/*; install Nsight Compute"
    )


# --- NVML (a warning), and no NVTX package --------------------------------------------------


def test_nvml_missing_or_failing_warns_that_clocks_go_unrecorded():
    missing = preflight.check_nvml(
        "ModuleNotFoundError: No module named 'pynvml'", None, CUDA_STUDY
    )
    assert (missing.status, missing.problem, missing.warning) == (MISSING, False, True)
    assert missing.line() == (
        "doctor: nvml: warning: pynvml cannot be imported (ModuleNotFoundError: No module named "
        "'pynvml'): the study runs, but its timed windows' SM clocks and throttle reasons go "
        "unrecorded (no window flagged for a clock drop or throttling); fix: pip install "
        "nvidia-ml-py"
    )
    failing = preflight.check_nvml(
        None, "NVMLError_LibraryNotFound: NVML Shared Library Not Found", CUDA_STUDY
    )
    assert failing.status == FAILED and failing.warning and not failing.problem
    assert "install or repair the driver" in failing.line()
    # A CPU study neither needs nor wants it: a remark, no warning, no fix.
    remark = preflight.check_nvml(None, "x", CPU_STUDY)
    assert not remark.problem and not remark.warning
    assert (
        remark.line()
        == "doctor: nvml: pynvml.nvmlInit() fails (x) (not needed: the study runs on cpu)"
    )
    working = preflight.check_nvml(None, None, CUDA_STUDY)
    assert (working.status, working.warning, working.problem) == (OK, False, False)


@pytest.fixture
def gpu_machine_without_nvtx_or_nvml(monkeypatch):
    """This machine as a GPU machine (driver, CUDA torch, nvidia-smi; no ncu) whose Python
    cannot import the `nvtx` package nor pynvml: their imports are faked away."""
    monkeypatch.setitem(sys.modules, "nvtx", None)
    monkeypatch.setitem(sys.modules, "pynvml", None)
    monkeypatch.setattr(devices, "absent_reason", lambda device: None)
    monkeypatch.setattr(preflight, "torch_facts", lambda: GPU_HERE)
    monkeypatch.setattr(
        preflight, "nvidia_smi_facts", lambda: preflight.parse_nvidia_smi(SMI_HEADER)
    )
    monkeypatch.setattr(profiling, "find_ncu", lambda *args, **kwargs: None)


def test_a_cuda_study_runs_without_the_nvtx_package_and_with_a_warning_without_nvml(
    gpu_machine_without_nvtx_or_nvml,
):
    with pytest.raises(ImportError):
        import nvtx  # noqa: F401 - the package is faked away
    here = preflight.gather_facts()
    assert here.nvml_import.startswith("ModuleNotFoundError: import of pynvml halted")
    problem, warned = preflight.cuda_preflight(False, here)
    assert problem is None
    assert [line.split(": ")[1:3] for line in warned] == [["nvml", "warning"]]
    assert "SM clocks and throttle reasons go unrecorded" in warned[0]
    # The workflow's onstart check: the warning goes out, and nothing stops the run.
    lines = []
    assert session.absent_device_problem(["cuda"], profiles_ncu=False, warn=lines.append) is None
    assert lines == warned
    assert session.absent_device_problem(["cuda"], profiles_ncu=False) is None


def test_doctor_passes_a_cuda_study_without_nvtx_and_says_it_warned(
    gpu_machine_without_nvtx_or_nvml, capsys, monkeypatch
):
    monkeypatch.chdir(REPO)
    assert cli.main(["doctor", "--configfile", "config/gpu.yaml"]) == 0
    out = capsys.readouterr()
    lines = out.out.splitlines()
    assert [line.split(": ")[1] for line in lines[:-1]] == CHECK_NAMES
    assert not any("nvtx" in line for line in lines)
    assert lines[-2].startswith("doctor: nvml: warning: pynvml cannot be imported")
    assert lines[-1] == (
        "doctor: ready: this machine has what config/gpu.yaml needs (with warnings: nvml)"
    )
    assert out.err == ""
    assert cli.main(["doctor", "--configfile", "config/gpu.yaml", "--json"]) == 0
    checks = json.loads(capsys.readouterr().out)
    assert [c["name"] for c in checks if c["warning"]] == ["nvml"]
    assert not any(c["problem"] for c in checks)


def test_nothing_in_nnperf_imports_the_nvtx_package():
    """Why the preflight does not ask for it: the profiled step's ranges are torch.cuda.nvtx's."""
    pattern = re.compile(r"^\s*(import nvtx\b|from nvtx\b)|import_module\(\s*['\"]nvtx['\"]", re.M)
    sources = [*(REPO / "src").rglob("*.py"), *(REPO / "workflow").rglob("*.py")]
    assert sources
    assert [str(path) for path in sources if pattern.search(path.read_text())] == []


# --- all checks together, and the workflow's preflight ----------------------------------------


def test_a_ready_gpu_machine_has_no_problem():
    probe = lambda argv: (0, GOOD_OUTPUT)  # noqa: E731
    checks = preflight.run_checks(CUDA_STUDY, facts(), probe)
    assert [c.name for c in checks] == CHECK_NAMES
    assert {c.status for c in checks} == {OK}
    assert preflight.cuda_preflight(True, facts(), probe) == (None, [])


def test_the_workflow_preflight_stops_on_denied_counters_only_when_it_profiles():
    denied = lambda argv: (0, PERM_OUTPUT)  # noqa: E731
    line = preflight.cuda_problem(True, facts(), denied)
    assert line.startswith("doctor: ncu-counters: ncu may not read the GPU's performance counters")
    never = lambda argv: pytest.fail("no ncu_profile job pending: no probe")  # noqa: E731
    assert preflight.cuda_problem(False, facts(), never) is None


def test_the_workflow_preflight_reports_the_first_problem():
    line = preflight.cuda_problem(False, facts(torch=CPU_TORCH))
    assert line == (
        "doctor: torch: torch 2.14.1+cpu is a CPU-only build (torch.version.cuda is None); "
        f"fix: {preflight.TORCH_FIX}"
    )


def test_nvidia_smi_facts_from_a_fake_nvidia_smi(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert preflight.nvidia_smi_facts() is None
    write_executable(tmp_path, "nvidia-smi", f"print({SMI_HEADER!r})")
    assert preflight.nvidia_smi_facts() == SmiFacts("580.95.05", "13.0")
    write_executable(
        tmp_path,
        "nvidia-smi",
        'print("NVIDIA-SMI has failed because it couldn\'t communicate with the NVIDIA driver.")\n'
        "raise SystemExit(9)",
    )
    assert preflight.nvidia_smi_facts().error == (
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
    )


def test_the_preflight_module_does_not_import_torch():
    code = "import sys, nnperf.study.preflight, nnperf.study.loading; print('torch' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=snakemake_env(),
        timeout=120,
    )
    assert result.stdout.strip() == "False", result.stderr


# --- the study a doctor checks ---------------------------------------------------------------


def test_a_study_file_is_read_as_the_workflow_reads_it():
    loaded = study.load_study(
        [REPO / "config" / "gpu.yaml"],
        ["dataset={name: synthetic, synthetic: {train_images: 50000, test_images: 10000}}"],
    )
    assert loaded.devices == ("cuda",)
    assert loaded.typed.ncu.enabled == "auto"
    # variants are the study file's, whole (overlay_study); defaults filled in.
    assert list(loaded.typed.variants) == ["baseline", "tuned", "compiled"]
    assert loaded.typed.dataset.name == "synthetic"
    assert loaded.typed.dataset.synthetic.train_images == 50000
    assert loaded.typed.study.name == "GPU training study"


@pytest.mark.parametrize(
    "text, message",
    [
        ("models: [a\n  b: c\n", "is not valid YAML at line 2, column 4: expected ',' or ']'"),
        (
            "- cpu\n",
            "cannot be read: Config file must be given as JSON or YAML with keys at top level.",
        ),
        (
            "devices: [gpu]\n",
            "config devices[0] = 'gpu' is not allowed; allowed: auto, cpu, cuda, mps",
        ),
    ],
)
def test_a_bad_study_file_is_one_line_naming_it(tmp_path, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(NnperfError) as error:
        study.load_study([path])
    assert str(path) in str(error.value) and message in str(error.value)
    assert "\n" not in str(error.value)


# --- the command, as a person runs it ---------------------------------------------------------


def doctor(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "nnperf", "doctor", *args],
        capture_output=True,
        text=True,
        env=snakemake_env(),
        cwd=REPO,
        timeout=300,
    )


no_gpu_here = pytest.mark.skipif(
    devices.has_cuda_driver() or profiling.find_ncu() is not None,
    reason="this machine has a GPU driver or ncu",
)


@no_gpu_here
def test_doctor_for_the_default_cpu_study_passes_and_says_what_is_absent():
    result = doctor()
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stdout.splitlines()
    assert [line.split(":")[1].strip() for line in lines[:-1]] == CHECK_NAMES
    assert (
        "doctor: cuda: no CUDA device: no GPU driver here (not needed: the study runs on cpu)"
        in lines
    )
    assert (
        "doctor: ncu: no ncu (looked in PATH, /usr/local/cuda/bin, /usr/local/cuda-*/bin, "
        "/opt/nvidia/nsight-compute/*) (not needed: the study runs on cpu)"
    ) in lines
    assert not any("fix:" in line for line in lines)
    assert lines[-1] == "doctor: ready: this machine has what config/config.yaml needs"


@no_gpu_here
def test_doctor_for_the_gpu_study_fails_with_one_line_per_check_and_no_traceback():
    result = doctor("--configfile", "config/gpu.yaml")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [
        "nnperf doctor: error: this machine lacks what config/gpu.yaml needs (driver, cuda): "
        "see the doctor lines above"
    ]
    checks = {line.split(": ")[1]: line for line in result.stdout.splitlines()}
    assert checks["cuda"] == f"doctor: cuda: no CUDA device: {devices.absent_reason('cuda')}"
    assert "; fix: run the study on a machine with an NVIDIA GPU" in checks["driver"]
    # ncu.enabled: auto and no ncu: said once, not a failure.
    assert checks["ncu"] == f"doctor: ncu: {ncu.ncu_exclusion_reason('auto', 'cuda', False)}"
    assert result.stdout.count("no Nsight Compute profiles") == 1
    assert checks["ncu-counters"] == "doctor: ncu-counters: not tried: no ncu"


@no_gpu_here
def test_doctor_json_lists_the_checks():
    result = doctor("--configfile", "config/gpu.yaml", "--json")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    checks = json.loads(result.stdout)
    assert [c["name"] for c in checks] == CHECK_NAMES
    assert {c["status"] for c in checks} <= set(preflight.STATUSES)
    assert [c["name"] for c in checks if c["problem"]] == ["driver", "cuda"]
    # No GPU driver here: NVML fails or is missing, a warning beside the problems.
    assert [c["name"] for c in checks if c["warning"]] == ["nvml"]
    ncu_check = next(c for c in checks if c["name"] == "ncu")
    assert (ncu_check["status"], ncu_check["needed"]) == (MISSING, False)


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "config file '{path}' does not exist"),
        ("ncu: {enabled: maybe}\n", "{path}: config ncu.enabled = 'maybe' is not allowed"),
        ("study: [\n", "config file '{path}' is not valid YAML at line 2, column 1"),
    ],
)
def test_doctor_with_a_bad_configfile_is_one_line_naming_it(tmp_path, content, message):
    path = tmp_path / "study.yaml"
    if content is not None:
        path.write_text(content)
    result = doctor("--configfile", str(path))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("nnperf doctor: error: ")
    assert message.format(path=path) in lines[0]
    assert result.stdout == ""


# --- the workflow runs the preflight before a CUDA study's first job --------------------------


@pytest.mark.workflow
@pytest.mark.skipif(devices.has_cuda_driver(), reason="this machine has a GPU driver")
def test_the_workflow_stops_a_cuda_study_before_its_first_job(workdir, tmp_path, monkeypatch):
    # A driver for CUDA 12.2 (nvidia-smi on PATH counts as a driver), older than torch's build.
    bin_dir = tmp_path / "fakebin"
    header = SMI_HEADER.replace("580.95.05", "535.104.05").replace(
        "CUDA Version: 13.0", "CUDA Version: 12.2"
    )
    write_executable(bin_dir, "nvidia-smi", f"print({header!r})")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    facts_here = preflight.gather_facts()
    expected = preflight.cuda_problem(False, facts_here)
    assert expected is not None

    result = run_snakemake(workdir, "--configfile", str(TINY_CONFIG), "--config", "devices=[cuda]")
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    stops = [line for line in result.stderr.splitlines() if line.startswith("nnperf: doctor: ")]
    assert stops == [f"nnperf: {expected}"]
    if facts_here.torch.cuda_build:
        assert stops[0].startswith(
            "nnperf: doctor: driver: driver 535.104.05, supports CUDA up to 12.2, older than "
            f"torch's CUDA {facts_here.torch.cuda_build} build; fix: update the NVIDIA driver"
        )
    assert "nnperf note: ncu.enabled is auto and ncu is not on PATH here" in result.stderr
    assert not (workdir / "results").exists()


@pytest.mark.parametrize(
    ("done", "profiles_ncu", "skipped"),
    [
        ("cuda+ncu", True, True),
        ("cuda+ncu", False, True),
        ("cuda", False, True),
        ("cuda", True, False),
        ("", False, False),
    ],
)
def test_the_onstart_check_is_skipped_only_where_its_caller_checked_as_much(
    monkeypatch, done, profiles_ncu, skipped
):
    """`nnperf gpu-study` runs the doctor's checks once and says so to its Snakemake calls;
    a call that needs more (ncu's probe) than was checked checks again."""
    asked = []
    monkeypatch.setattr(devices, "absent_reason", lambda device: None)
    monkeypatch.setattr(
        preflight, "cuda_preflight", lambda profile_ncu: asked.append(profile_ncu) or (None, [])
    )
    monkeypatch.setenv(session.PREFLIGHT_DONE_ENV, done)
    assert session.absent_device_problem(["cuda"], profiles_ncu=profiles_ncu) is None
    assert asked == ([] if skipped else [profiles_ncu])


def test_gpu_study_checks_once_and_tells_every_stage(
    gpu_machine_without_nvtx_or_nvml, monkeypatch, tmp_path, capsys
):
    """The doctor's lines first, timed as the stage `preflight`; then each stage's Snakemake
    call runs with the preflight marked done (no ncu here, so without ncu's probe)."""
    from nnperf.commands import gpu_study
    from nnperf.study import stages

    seen = []

    def fake_stages(*args, environ=None, **kwargs):
        seen.append(environ.get(session.PREFLIGHT_DONE_ENV))
        return [stages.StageTime("timed_runs", "timed runs", 1.0)]

    monkeypatch.setattr(stages, "run_stages", fake_stages)
    monkeypatch.setattr(
        stages, "write_example", lambda loaded, times, *a, **k: seen.append(times) or []
    )
    monkeypatch.chdir(REPO)
    assert cli.main(["gpu-study", "--check", "--dest", str(tmp_path / "example")]) == 0
    assert seen[0] == "cuda+ncu"
    assert [t.stage for t in seen[1]] == ["preflight", "timed_runs"]
    assert "doctor: ready" in capsys.readouterr().out
