"""What a study needs from this machine below torch, checked before it runs (`nnperf doctor`).

A GPU study that lacks something under torch fails late and far from the cause: a CPU-only
torch wheel, a driver older than torch's CUDA build, no `ncu`, an `ncu` the driver does not let
read the GPU's performance counters (ERR_NVGPUCTRPERM), no NVML for the clocks of the timed
windows. Each would surface minutes into the run as failed jobs with long logs; here each is
one line, with its fix, before the first measurement (`nnperf doctor` by hand, and the
workflow's `onstart` handler when CUDA jobs are pending).

Only what the study cannot run without stops it. NVML is not such a need: without it the
timed windows run and are timed as ever, only their clocks and throttle reasons go unrecorded
(`nnperf.engine.stability.GpuSampler` leaves those fields null), so a missing or failing NVML
is a warning. The `nvtx` package is not checked at all: nothing in nnperf imports it, the
profiled step marks its ranges with `torch.cuda.nvtx`, which comes with torch.

The checks (`check_*`) are functions of what the machine reported (`TorchFacts`, `SmiFacts`,
an ncu path, a probe's output, an import error), so tests give them made-up reports; the
`*_facts`/`probe_*` functions at the bottom are the edge that asks the machine. Nothing here
imports torch at module level: the workflow imports this module while it builds every DAG.

What a study needs (`Needs`) comes from its devices and `ncu.enabled`: the CUDA checks matter
only to a study on `cuda`; `ncu` to one that profiles (`true`, or `auto` when ncu is found).
A study that does not need a check still gets its line, saying so.
"""

from __future__ import annotations

import importlib
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass
from typing import Callable, Sequence

from nnperf.core import devices
from nnperf.ncu import command
from nnperf.ncu import metrics

# Check statuses: what was found, or that the check was not run because nothing needs it.
OK = "ok"
MISSING = "missing"
FAILED = "failed"
NOT_NEEDED = "not needed"
STATUSES = (OK, MISSING, FAILED, NOT_NEEDED)

# Needs.ncu: whether the study profiles under ncu.
NCU_REQUIRED = "required"  # ncu.enabled: true on CUDA
NCU_IF_FOUND = "if found"  # ncu.enabled: auto on CUDA: profiles when ncu is here
NCU_NO = "no"  # no CUDA device, or ncu.enabled: false

TORCH_FIX = (
    "install a CUDA build of torch: pip install --force-reinstall torch torchvision "
    "--index-url https://download.pytorch.org/whl/cuXYZ, with cuXYZ no newer than the CUDA "
    "version nvidia-smi shows (pytorch.org/get-started)"
)
COUNTERS_DOCS = "https://developer.nvidia.com/ERR_NVGPUCTRPERM"
COUNTERS_FIX = (
    "let every user read them: sudo modprobe nvidia NVreg_RestrictProfilingToAdminUsers=0, "
    "persisted with the line 'options nvidia NVreg_RestrictProfilingToAdminUsers=0' in "
    "/etc/modprobe.d/nvidia-profiling.conf (then reboot); or run the study as root; "
    f"see {COUNTERS_DOCS}; or set ncu.enabled: false to run without profiles"
)
# One counter of one tiny kernel: enough to meet ERR_NVGPUCTRPERM, a few seconds of ncu.
PROBE_METRIC = "sm__cycles_elapsed.avg"
PROBE_OP = "import torch; torch.ones(8, device='cuda').add_(1); torch.cuda.synchronize()"
PROBE_TIMEOUT_S = 90


@dataclass(frozen=True)
class Check:
    """One check's outcome: `text` is one line; `fix` is added to it when it is a problem or
    a warning. `wanted`: the study uses it but runs without it, losing something (`text` says
    what), so its absence is a warning, never a problem."""

    name: str
    status: str
    needed: bool
    text: str
    fix: str = ""
    wanted: bool = False

    @property
    def problem(self) -> bool:
        """Missing or failed, and the study needs it."""
        return self.needed and self.status in (MISSING, FAILED)

    @property
    def warning(self) -> bool:
        """Missing or failed, and the study runs without it, with less recorded."""
        return self.wanted and not self.needed and self.status in (MISSING, FAILED)

    def line(self) -> str:
        fix = f"; fix: {self.fix}" if (self.problem or self.warning) and self.fix else ""
        warning = "warning: " if self.warning else ""
        return f"doctor: {self.name}: {warning}{self.text}{fix}"

    def as_dict(self) -> dict:
        return {
            **asdict(self),
            "problem": self.problem,
            "warning": self.warning,
            "line": self.line(),
        }


@dataclass(frozen=True)
class Needs:
    """What a study needs of this machine."""

    cuda: bool
    ncu: str = NCU_NO
    devices: tuple[str, ...] = ()

    @property
    def unneeded(self) -> str:
        """Why the CUDA checks do not matter here, for their lines."""
        on = ", ".join(self.devices) or "no CUDA device"
        return f"not needed: the study runs on {on}"


def needs_of(devices_: Sequence[str], ncu_enabled: object) -> Needs:
    """Needs of a study on `devices_` (`auto` resolved) with config `ncu.enabled`."""
    cuda = "cuda" in devices_
    if metrics.ncu_included(ncu_enabled, "cuda", ncu_on_path=False) and cuda:
        mode = NCU_REQUIRED
    elif metrics.ncu_included(ncu_enabled, "cuda", ncu_on_path=True) and cuda:
        mode = NCU_IF_FOUND
    else:
        mode = NCU_NO
    return Needs(cuda=cuda, ncu=mode, devices=tuple(devices_))


@dataclass(frozen=True)
class TorchFacts:
    """What torch says about CUDA (`version` None: torch cannot be imported)."""

    version: str | None
    cuda_build: str | None = None  # torch.version.cuda
    hip_build: str | None = None  # torch.version.hip (ROCm, which torch drives as "cuda")
    cuda_available: bool = False
    device_count: int = 0
    device_name: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class SmiFacts:
    """nvidia-smi's header: the driver and the newest CUDA it supports (or why it failed)."""

    driver_version: str | None = None
    cuda_version: str | None = None
    error: str | None = None


def _version(text: str | None) -> tuple[int, ...] | None:
    numbers = re.findall(r"\d+", text or "")
    return tuple(int(n) for n in numbers[:2]) if numbers else None


def parse_nvidia_smi(text: str) -> SmiFacts:
    """Driver and CUDA version from plain `nvidia-smi` output (its header table)."""
    driver = re.search(r"Driver Version:\s*([\d.]+)", text)
    cuda = re.search(r"CUDA Version:\s*([\d.]+)", text)
    return SmiFacts(driver.group(1) if driver else None, cuda.group(1) if cuda else None)


# --- the checks ------------------------------------------------------------------------------


def check_torch(torch: TorchFacts, needs: Needs) -> Check:
    """torch importable, and built for CUDA (torch.version.cuda) or ROCm."""
    if torch.version is None:
        return Check(
            "torch",
            MISSING,
            True,
            f"torch cannot be imported ({torch.error})",
            "build the environment: make test-fast builds .venv, or pip install -e . beside "
            "a torch of your own",
        )
    if torch.cuda_build:
        return Check(
            "torch", OK, needs.cuda, f"torch {torch.version}, built for CUDA {torch.cuda_build}"
        )
    if torch.hip_build:
        return Check(
            "torch", OK, needs.cuda, f"torch {torch.version}, built for ROCm {torch.hip_build}"
        )
    text = f"torch {torch.version} is a CPU-only build (torch.version.cuda is None)"
    if not needs.cuda:
        text += f" ({needs.unneeded})"
    return Check("torch", MISSING, needs.cuda, text, TORCH_FIX)


def check_driver(
    absent: str | None, smi: SmiFacts | None, torch: TorchFacts, needs: Needs
) -> Check:
    """A GPU driver here (`devices.absent_reason`), and its CUDA version against torch's build."""
    if absent:
        looked = ", ".join(devices.CUDA_DRIVER_FILES + devices.CUDA_TOOLS)
        text = f"no GPU driver here (none of {looked})"
        if not needs.cuda:
            text += f" ({needs.unneeded})"
        return Check(
            "driver",
            MISSING,
            needs.cuda,
            text,
            "run the study on a machine with an NVIDIA GPU and its driver (nvidia-smi lists "
            "the GPU), or through a cluster profile (docs/cluster.md), or use devices: [cpu]",
        )
    if smi is None:
        return Check(
            "driver",
            OK,
            needs.cuda,
            "GPU driver present; no nvidia-smi, so its CUDA version is not compared with torch's",
        )
    if smi.error:
        return Check(
            "driver",
            FAILED,
            needs.cuda,
            f"nvidia-smi fails: {smi.error}",
            "the driver does not answer: reinstall it or load its kernel module (nvidia-smi must "
            "list the GPU)",
        )
    text = f"driver {smi.driver_version}, supports CUDA up to {smi.cuda_version}"
    driver_cuda, torch_cuda = _version(smi.cuda_version), _version(torch.cuda_build)
    if driver_cuda is None or torch_cuda is None or driver_cuda >= torch_cuda:
        built = f"; torch is built for CUDA {torch.cuda_build}" if torch.cuda_build else ""
        return Check("driver", OK, needs.cuda, text + built)
    older = f"{text}, older than torch's CUDA {torch.cuda_build} build"
    fix = (
        f"update the NVIDIA driver to one for CUDA {torch.cuda_build} or newer, or install a "
        f"torch built for CUDA {smi.cuda_version} or older "
        "(--index-url https://download.pytorch.org/whl/cuXYZ)"
    )
    if driver_cuda[0] == torch_cuda[0]:
        # CUDA minor-version compatibility: a 12.x driver runs a 12.y runtime's prebuilt
        # kernels; only PTX compiled for the newer minor version fails to load.
        return Check(
            "driver",
            OK,
            needs.cuda,
            f"{older}: it runs by CUDA minor-version compatibility (if a kernel fails to load "
            "with an unsupported PTX version, update the driver)",
        )
    return Check("driver", FAILED, needs.cuda, older, fix)


def check_cuda(absent: str | None, torch: TorchFacts, needs: Needs) -> Check:
    """torch.cuda.is_available(), and why not."""
    if torch.cuda_available:
        name = f": {torch.device_name}" if torch.device_name else ""
        return Check("cuda", OK, needs.cuda, f"{torch.device_count} CUDA device(s){name}")
    fix = ""
    if absent:
        # absent_reason's own advice (devices: [cpu], a GPU machine) is for a study on cuda.
        reason, status = (absent if needs.cuda else "no GPU driver here"), MISSING
    elif torch.version is None:
        reason, status = "torch cannot be imported", MISSING
    elif not (torch.cuda_build or torch.hip_build):
        reason, status, fix = (
            f"a GPU driver is here, but torch {torch.version} is a CPU-only build",
            FAILED,
            TORCH_FIX,
        )
    else:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        hidden = f" with CUDA_VISIBLE_DEVICES={visible!r}" if visible is not None else ""
        reason, status, fix = (
            f"a GPU driver is here, but torch.cuda.is_available() is False{hidden}",
            FAILED,
            "check that nvidia-smi lists a GPU, that CUDA_VISIBLE_DEVICES names it, and that the "
            "driver line above supports torch's CUDA build",
        )
    text = f"no CUDA device: {reason}"
    if not needs.cuda:
        text += f" ({needs.unneeded})"
    return Check("cuda", status, needs.cuda, text, fix)


def check_ncu(found: str | None, needs: Needs, version: str | None = None) -> Check:
    """`ncu` found (profiling.find_ncu), as far as the study profiles."""
    where = f"{found} ({version})" if found and version else found
    if needs.ncu == NCU_NO:
        if not needs.cuda:
            text = f"ncu at {where}" if found else f"no ncu (looked in {metrics.searched_places()})"
            return Check("ncu", OK if found else MISSING, False, f"{text} ({needs.unneeded})")
        return Check("ncu", NOT_NEEDED, False, "ncu.enabled is false: no Nsight Compute profiles")
    if found:
        return Check("ncu", OK, True, f"ncu at {where}")
    if needs.ncu == NCU_IF_FOUND:
        # Not a failure: the workflow leaves the profiles out and says so (this same line).
        return Check("ncu", MISSING, False, metrics.ncu_exclusion_reason("auto", "cuda", False))
    return Check(
        "ncu",
        MISSING,
        True,
        f"ncu.enabled is true, but there is no ncu on {metrics.searched_places()}",
        "install Nsight Compute (it comes with the CUDA toolkit; developer.nvidia.com/"
        "nsight-compute) and put its folder on PATH, or set ncu.enabled: false",
    )


def probe_command(executable: str, python: str = sys.executable) -> list[str]:
    """ncu reading one counter of one tiny CUDA kernel."""
    return [
        executable,
        "--metrics",
        PROBE_METRIC,
        "--launch-count",
        "1",
        "--target-processes",
        "all",
        python,
        "-c",
        PROBE_OP,
    ]


def check_counters(
    found: str | None,
    torch: TorchFacts,
    needs: Needs,
    probe: Callable[[list[str]], tuple[int | None, str]] | None = None,
) -> Check:
    """ncu may read the GPU's performance counters: a one-kernel, one-metric profile.

    `probe(argv)` runs it and returns (exit status or None on timeout, stdout + stderr).
    """
    name = "ncu-counters"
    if needs.ncu == NCU_NO:
        return Check(name, NOT_NEEDED, False, "not tried: the study profiles nothing under ncu")
    if not found:
        return Check(name, NOT_NEEDED, False, "not tried: no ncu")
    if not torch.cuda_available:
        return Check(name, NOT_NEEDED, False, "not tried: no CUDA device to profile")
    argv = probe_command(found)
    returncode, output = (probe or run_probe)(argv)
    by_hand = f"run it by hand to see why: {shlex.join(argv)}"
    if "ERR_NVGPUCTRPERM" in output:
        return Check(
            name,
            FAILED,
            True,
            "ncu may not read the GPU's performance counters (ERR_NVGPUCTRPERM: the driver "
            "restricts them to admin users)",
            COUNTERS_FIX,
        )
    if returncode is None:
        return Check(
            name, FAILED, True, f"ncu did not profile one kernel in {PROBE_TIMEOUT_S} s", by_hand
        )
    errors = [line.strip() for line in output.splitlines() if "==ERROR==" in line]
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    if "No kernels were profiled" in output:
        problem = "ncu profiled no kernel of a tiny CUDA op"
    elif errors:
        problem = f"ncu could not profile a tiny CUDA op: {errors[0]}"
    elif returncode != 0:
        last = f": {lines[-1]}" if lines else ""
        problem = f"ncu exited with status {returncode} profiling a tiny CUDA op{last}"
    elif not any(line.startswith(PROBE_METRIC) for line in lines):
        problem = f"ncu printed no {PROBE_METRIC} value for a tiny CUDA op"
    else:
        return Check(name, OK, True, f"ncu reads the GPU's performance counters ({PROBE_METRIC})")
    return Check(name, FAILED, True, problem, by_hand)


def check_nvml(import_error: str | None, init_error: str | None, needs: Needs) -> Check:
    """pynvml importable (package nvidia-ml-py) and nvmlInit() working: the timed windows'
    SM clocks and throttle reasons come from NVML (nnperf.engine.stability). Wanted, not
    needed: without NVML the sampler records no clocks and the study runs on (a warning)."""
    if import_error is None and init_error is None:
        return Check(
            "nvml",
            OK,
            False,
            "pynvml.nvmlInit() works (SM clocks of timed windows)",
            wanted=needs.cuda,
        )
    if import_error is not None:
        status, text, fix = (
            MISSING,
            f"pynvml cannot be imported ({import_error})",
            "pip install nvidia-ml-py",
        )
    else:
        status, text, fix = (
            FAILED,
            f"pynvml.nvmlInit() fails ({init_error})",
            "NVML (libnvidia-ml.so) comes with the NVIDIA driver: install or repair the driver",
        )
    if needs.cuda:
        text += (
            ": the study runs, but its timed windows' SM clocks and throttle reasons go "
            "unrecorded (no window flagged for a clock drop or throttling)"
        )
    else:
        text += f" ({needs.unneeded})"
    return Check("nvml", status, False, text, fix, wanted=needs.cuda)


@dataclass(frozen=True)
class Facts:
    """What this machine reported, for the checks (`gather_facts`)."""

    absent: str | None  # devices.absent_reason("cuda")
    torch: TorchFacts
    smi: SmiFacts | None  # None: no nvidia-smi
    ncu: str | None = None  # profiling.find_ncu()
    ncu_version: str | None = None
    nvml_import: str | None = None
    nvml_init: str | None = None


def run_checks(
    needs: Needs,
    facts: Facts | None = None,
    probe: Callable[[list[str]], tuple[int | None, str]] | None = None,
) -> list[Check]:
    """Every check for `needs`, on `facts` (default: this machine's, `gather_facts()`).

    `probe` runs the counter probe (default `run_probe`), which only runs when the study
    profiles under ncu and ncu and a CUDA device are here.
    """
    facts = facts if facts is not None else gather_facts()
    return [
        check_torch(facts.torch, needs),
        check_driver(facts.absent, facts.smi, facts.torch, needs),
        check_cuda(facts.absent, facts.torch, needs),
        check_ncu(facts.ncu, needs, facts.ncu_version),
        check_counters(facts.ncu, facts.torch, needs, probe),
        check_nvml(facts.nvml_import, facts.nvml_init, needs),
        # No check of the `nvtx` package: nothing imports it (the profiled step's ranges are
        # torch.cuda.nvtx's, part of torch), so a study without it loses nothing.
    ]


def problems(checks: Sequence[Check]) -> list[Check]:
    return [check for check in checks if check.problem]


def warnings(checks: Sequence[Check]) -> list[Check]:
    return [check for check in checks if check.warning]


def cuda_preflight(
    profile_ncu: bool, facts: Facts | None = None, probe=None
) -> tuple[str | None, list[str]]:
    """What stops CUDA jobs about to run here, and what they run without: (the first missing
    or failed need as one line, or None; one line per warning). `profile_ncu`: ncu_profile
    jobs are among them (ncu and its counters checked)."""
    needs = Needs(cuda=True, ncu=NCU_REQUIRED if profile_ncu else NCU_NO, devices=("cuda",))
    checks = run_checks(needs, facts, probe)
    found = problems(checks)
    return (found[0].line() if found else None), [check.line() for check in warnings(checks)]


def cuda_problem(profile_ncu: bool, facts: Facts | None = None, probe=None) -> str | None:
    """The first missing or failed need of CUDA jobs about to run here (`cuda_preflight`)."""
    return cuda_preflight(profile_ncu, facts, probe)[0]


# --- the edge: asking this machine ------------------------------------------------------------


def gather_facts() -> Facts:
    """Ask this machine: the driver files, torch (imported here), nvidia-smi, ncu, NVML."""
    found = command.find_ncu()
    nvml_import, nvml_init = nvml_errors()
    return Facts(
        absent=devices.absent_reason("cuda"),
        torch=torch_facts(),
        smi=nvidia_smi_facts(),
        ncu=found,
        ncu_version=command.ncu_version(found) if found else None,
        nvml_import=nvml_import,
        nvml_init=nvml_init,
    )


def torch_facts() -> TorchFacts:
    try:
        import torch
    except Exception as error:  # noqa: BLE001 - any import failure is the answer
        return TorchFacts(version=None, error=f"{type(error).__name__}: {error}")
    available = bool(torch.cuda.is_available())
    count = torch.cuda.device_count() if available else 0
    return TorchFacts(
        version=torch.__version__,
        cuda_build=torch.version.cuda,
        hip_build=getattr(torch.version, "hip", None),
        cuda_available=available,
        device_count=count,
        device_name=torch.cuda.get_device_name(0) if count else None,
    )


def nvidia_smi_facts(timeout_s: float = 30) -> SmiFacts | None:
    """nvidia-smi's header, None without nvidia-smi."""
    executable = shutil.which("nvidia-smi")
    if executable is None:
        return None
    try:
        result = subprocess.run([executable], capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as error:
        return SmiFacts(error=f"{type(error).__name__}: {error}")
    facts = parse_nvidia_smi(result.stdout)
    if result.returncode != 0 or facts.driver_version is None:
        lines = [
            line.strip() for line in (result.stdout + result.stderr).splitlines() if line.strip()
        ]
        return SmiFacts(error=lines[0] if lines else f"exit status {result.returncode}")
    return facts


def run_probe(argv: list[str], timeout_s: float = PROBE_TIMEOUT_S) -> tuple[int | None, str]:
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return None, ""
    except OSError as error:
        return 127, f"==ERROR== {error}"
    return result.returncode, result.stdout + result.stderr


def import_error(module: str) -> str | None:
    try:
        importlib.import_module(module)
    except Exception as error:  # noqa: BLE001 - any import failure is the answer
        return f"{type(error).__name__}: {error}"
    return None


def nvml_errors() -> tuple[str | None, str | None]:
    """(import error, nvmlInit error) of pynvml."""
    missing = import_error("pynvml")
    if missing:
        return missing, None
    import pynvml

    try:
        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
    except Exception as error:  # noqa: BLE001 - NVMLError_* and OSError alike
        return None, f"{type(error).__name__}: {error}"
    return None, None
