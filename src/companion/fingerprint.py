"""Fingerprints of the numerical kernels the papers run, to name the ones whose bits differ between machines.

Under the numerics profile some records stored on one x86-64 CPU train differently on another (an AMD EPYC
against an Intel Xeon: fr-geometry and actor move, adversarial-curation and win-rate do not), and which kernel
gives the other bits is not known. Each probe here runs one kernel family (a matrix product of a given shape
through MKL, a convolution and its gradients through oneDNN, torch's vectorised elementwise and reduction
kernels, numpy's SIMD loops and OpenBLAS, LAPACK) on fixed inputs drawn from numpy's PCG64 (the same bits on
every machine) and hashes the output's bytes. ``companion numerics`` prints this machine's fingerprints beside
those stored for other machines in ``data/numerics/fingerprints.json`` and names the probes that differ;
``--store`` adds this machine's. Hand-written: no library fingerprints kernel outputs across machines.
"""

from __future__ import annotations

import collections
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from companion import numerics

STORE = Path("data") / "numerics" / "fingerprints.json"
LIBRARIES = ("torch", "numpy", "scipy")
Probe = Callable[[], Any]
QEMU = "qemu-x86_64"
# ATen kernels whose bits depend on how the CPU implements its approximate instructions (rsqrtps, rcpps):
# MKL's vector math on its generic code path, found by emulation (``--emulate``). pow(x, 0.5) runs the sqrt kernel.
VENDOR_DEPENDENT = frozenset({"sqrt", "acos", "asin", "atan", "log10", "_foreach_sqrt"})


def _inputs(*shape: int, seed: int = 0) -> np.ndarray:
    """Fixed float32 inputs: PCG64 gives the same bits on every machine."""
    return np.random.default_rng(seed + 7 * len(shape)).standard_normal(shape).astype(np.float32)


def _t(*shape: int, seed: int = 0) -> Any:
    import torch

    return torch.from_numpy(_inputs(*shape, seed=seed))


def _conv_grads() -> Any:
    import torch

    x, w = _t(4, 8, 16, 16).requires_grad_(), _t(16, 8, 3, 3, seed=1).requires_grad_()
    torch.nn.functional.conv2d(x, w, padding=1).square().sum().backward()
    return torch.cat([x.grad.ravel(), w.grad.ravel()])


def _adam_steps(fused: bool = False) -> Any:
    import torch

    from companion.models import optim

    model = torch.nn.Linear(64, 32)
    with torch.no_grad():
        model.weight.copy_(_t(32, 64, seed=2))
        model.bias.zero_()
    opt = (optim.Adam if fused else torch.optim.Adam)(model.parameters(), lr=1e-3)
    x = _t(128, 64, seed=3)
    for _ in range(5):
        opt.zero_grad()
        torch.tanh(model(x)).square().mean().backward()
        opt.step()
    return model.weight.detach()


def _torch_probes() -> dict[str, Probe]:
    import torch
    import torch.nn.functional as F

    return {
        "torch.mm 37x53x29 (MKL sgemm, small)": lambda: _t(37, 53) @ _t(53, 29, seed=1),
        "torch.mm 256x512x384 (MKL sgemm)": lambda: _t(256, 512) @ _t(512, 384, seed=1),
        "F.linear 64x300->200 (addmm)": lambda: F.linear(_t(64, 300), _t(200, 300, seed=1), _t(200, seed=2)),
        "torch.bmm 8x33x47x21": lambda: torch.bmm(_t(8, 33, 47), _t(8, 47, 21, seed=1)),
        "conv2d forward (oneDNN)": lambda: F.conv2d(_t(4, 8, 16, 16), _t(16, 8, 3, 3, seed=1), padding=1),
        "conv2d backward (oneDNN)": _conv_grads,
        "softmax 128x1000": lambda: torch.softmax(_t(128, 1000), -1),
        "log_softmax 128x1000": lambda: torch.log_softmax(_t(128, 1000), -1),
        "exp": lambda: torch.exp(_t(100_000)),
        "tanh": lambda: torch.tanh(_t(100_000)),
        "log": lambda: torch.log(_t(100_000).abs() + 1e-3),
        "gelu (erf)": lambda: F.gelu(_t(100_000)),
        "gelu (tanh)": lambda: F.gelu(_t(100_000), approximate="tanh"),
        "layer_norm 64x384": lambda: F.layer_norm(_t(64, 384), (384,)),
        "sum 1e6": lambda: _t(1_000_000).sum(),
        "cdist 200x64 300x64": lambda: torch.cdist(_t(200, 64), _t(300, 64, seed=1)),
        "scaled_dot_product_attention": lambda: F.scaled_dot_product_attention(
            _t(2, 4, 64, 32), _t(2, 4, 64, 32, seed=1), _t(2, 4, 64, 32, seed=2), is_causal=True),
        "torch.randn (CPU generator)": lambda: torch.randn(10_000, generator=torch.Generator().manual_seed(0)),
        "Adam, 5 steps": _adam_steps,
        "Adam fused (models.optim), 5 steps": lambda: _adam_steps(fused=True),
        "sqrt f32, f64 (MKL VML vsSqrt)": lambda: torch.cat([torch.sqrt(_t(100_000).abs()).double(),
                                                             torch.sqrt(_t(100_000, seed=1).abs().double())]),
        "acos, asin, atan, log10 (MKL VML)": lambda: torch.cat([
            torch.acos(_t(100_000).clamp(-0.99, 0.99)), torch.asin(_t(100_000).clamp(-0.99, 0.99)),
            torch.atan(_t(100_000)), torch.log10(_t(100_000).abs() + 1e-3)]),
        "torch.linalg.eigh 64 (MKL LAPACK)": lambda: torch.linalg.eigvalsh(_sym(64)),
    }


def _sym(n: int) -> Any:
    a = _t(n, n)
    return a @ a.T


def _numpy_probes() -> dict[str, Probe]:
    import scipy.linalg

    x64 = lambda n, seed=0: _inputs(n, seed=seed).astype(np.float64)  # noqa: E731
    return {
        "numpy matmul f32 (OpenBLAS)": lambda: _inputs(200, 300) @ _inputs(300, 100, seed=1),
        "numpy matmul f64 (OpenBLAS)": lambda: _inputs(200, 300).astype(np.float64) @ _inputs(300, 100, seed=1),
        "numpy exp f32": lambda: np.exp(_inputs(100_000)),
        "numpy exp f64": lambda: np.exp(x64(100_000)),
        "numpy tanh f32": lambda: np.tanh(_inputs(100_000)),
        "numpy log f64": lambda: np.log(np.abs(x64(100_000)) + 1e-3),
        "numpy sin f32": lambda: np.sin(_inputs(100_000)),
        "numpy sum f32": lambda: _inputs(1_000_000).sum(),
        "numpy sort f32": lambda: np.sort(_inputs(100_000)),
        "numpy linalg.eigh f64 (LAPACK)": lambda: np.linalg.eigvalsh(np.cov(_inputs(50, 200).astype(np.float64))),
        "scipy linalg.solve f64": lambda: scipy.linalg.solve(np.cov(_inputs(60, 200).astype(np.float64)),
                                                             x64(60, seed=1)),
    }


def digest(value: Any) -> str:
    """The first 16 hex digits of the SHA-256 of an array's bytes (a torch tensor is read as numpy)."""
    array = value.detach().numpy() if hasattr(value, "detach") else np.asarray(value)
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()[:16]


def fingerprints(threads: int = 2) -> dict[str, str]:
    """Every probe's digest on this machine, torch at ``threads`` intra-op threads (the records' count)."""
    import torch

    torch.set_num_threads(threads)
    return {name: digest(probe()) for name, probe in {**_torch_probes(), **_numpy_probes()}.items()}


def machine(threads: int = 2) -> dict[str, Any]:
    """This machine as a fingerprint entry: CPU, profile, threads, library versions and the digests."""
    return {"cpu": numerics.cpu_model(), "arch": platform.machine(), "profile": numerics.active(),
            "threads": threads, "versions": {lib: metadata.version(lib) for lib in LIBRARIES},
            "fingerprints": fingerprints(threads)}


def load(path: Path) -> list[dict[str, Any]]:
    """The stored machines' entries (none when the file does not exist)."""
    return json.loads(path.read_text())["machines"] if path.exists() else []


def same_setting(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two entries are of the same CPU, profile, thread count and library versions."""
    return all(a[k] == b[k] for k in ("cpu", "profile", "threads", "versions"))


def store(entry: dict[str, Any], path: Path) -> None:
    """Add (or replace) ``entry`` for its CPU, profile, threads and versions in the store at ``path``."""
    kept = [m for m in load(path) if not same_setting(m, entry)]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"machines": [*kept, entry]}, indent=1, sort_keys=True) + "\n")


def differing(here: dict[str, Any], there: dict[str, Any]) -> list[str] | None:
    """The probes whose digests differ between two entries; None when they are not comparable
    (other library versions, thread count or profile)."""
    if any(here[k] != there[k] for k in ("profile", "threads", "versions")):
        return None
    return [name for name, d in here["fingerprints"].items() if there["fingerprints"].get(name) != d]


def profile_text(profile: dict[str, str]) -> str:
    """``profile on``, ``profile off``, or the variables a candidate profile sets otherwise."""
    if not profile:
        return "profile off"
    changed = [f"{name}={value}" for name, value in profile.items() if numerics.PROFILE.get(name) != value]
    return "profile on" + (f" with {', '.join(changed)}" if changed else "")


def report(here: dict[str, Any], stored: list[dict[str, Any]]) -> str:
    """Plain text: for each stored machine, the probes that give other bits here (or why not compared)."""
    lines = [f"this machine: {here['cpu']} ({here['arch']}), {here['threads']} threads, "
             f"{profile_text(here['profile'])}, {len(here['fingerprints'])} probes"]
    for other in stored:
        diff = differing(here, other)
        if diff is None:
            lines.append(f"- {other['cpu']}, {profile_text(other['profile'])}: not comparable "
                         f"(other versions, threads or profile)")
        elif not diff:
            lines.append(f"- {other['cpu']}: every probe gives the same bits")
        else:
            lines.append(f"- {other['cpu']}: {len(diff)} probes differ: {'; '.join(diff)}")
    if not stored:
        lines.append("- no machine stored yet (companion numerics --store)")
    return "\n".join(lines)


@contextmanager
def vendor_dependent_calls() -> Iterator[collections.Counter[str]]:
    """Inside: count the calls of :data:`VENDOR_DEPENDENT` kernels (and pow to 0.5), forward and backward."""
    from torch.utils._python_dispatch import TorchDispatchMode

    seen: collections.Counter[str] = collections.Counter()

    class _Count(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            name = func.__name__.split(".")[0].rstrip("_")
            half = name == "pow" and len(args) > 1 and isinstance(args[1], (int, float)) and args[1] == 0.5
            if name in VENDOR_DEPENDENT or half:
                seen[str(func)] += 1
            return func(*args, **(kwargs or {}))

    with _Count():
        yield seen


def emulated_models() -> list[str]:
    """The CPU models this machine's QEMU user-mode emulator offers (empty when it is not installed)."""
    if shutil.which(QEMU) is None:
        return []
    listing = subprocess.run([QEMU, "-cpu", "help"], capture_output=True, text=True).stdout
    models = listing.split("\n\n")[0].splitlines()  # then come the CPUID flags
    # QEMU 7 writes "x86 NAME  description", QEMU 10 "  NAME  description" under a heading
    return [line.split()[line.startswith("x86 ")] for line in models if line.startswith(("x86 ", "  "))]


def emulated(model: str, threads: int = 2) -> dict[str, Any]:
    """The fingerprint entry of this machine's Python run under QEMU as CPU ``model``, in this environment.

    QEMU computes IEEE arithmetic exactly like any x86-64 CPU, and the approximate instructions (rsqrtps,
    rcpps) in its own way, as each vendor does; a probe that differs under it depends on the CPU's vendor."""
    script = ("import json; from companion import numerics; numerics.apply(); from companion import fingerprint; "
              f"print(json.dumps(fingerprint.machine({threads})))")
    run = subprocess.run([QEMU, "-cpu", model, sys.executable, "-c", script], capture_output=True, text=True,
                         check=True)
    version = subprocess.run([QEMU, "--version"], capture_output=True, text=True).stdout.split()[2]
    return {**json.loads(run.stdout), "cpu": f"QEMU {version} as {model} (emulated on {numerics.cpu_model()})"}


# Run under QEMU: a paper's preset in this process as its notebook runs it, the seed pool's workers under QEMU too.
_REPRODUCE = """
import importlib, json, multiprocessing.spawn, os, sys
from companion import claims, numerics
numerics.apply()
multiprocessing.spawn.set_executable(os.environ["COMPANION_EMULATED_PYTHON"])
paper = importlib.import_module(sys.argv[1])
params = paper.Params.resolve(sys.argv[2], seed=int(sys.argv[3]))
verdicts = paper.check(paper.run(params))
print(json.dumps([claims._jsonable(v.to_dict()) for v in verdicts]))
"""


def emulated_claims(module: str, preset: str, seed: int, threads: int, model: str) -> list[dict[str, Any]]:
    """The claims of paper ``module``'s ``preset`` at ``seed`` computed under QEMU as CPU ``model``."""
    from companion.executor import THREAD_VARS

    with tempfile.TemporaryDirectory() as tmp:
        wrapper = Path(tmp) / "python"
        wrapper.write_text(f'#!/bin/sh\nexec {QEMU} -cpu {model} {sys.executable} "$@"\n')
        wrapper.chmod(0o755)
        env = {**os.environ, "COMPANION_EMULATED_PYTHON": str(wrapper), **dict.fromkeys(THREAD_VARS, str(threads))}
        run = subprocess.run([str(wrapper), "-c", _REPRODUCE, module, preset, str(seed)], capture_output=True,
                             text=True, env=env)
    if run.returncode:
        raise RuntimeError(f"the emulated run failed ({run.returncode}): {run.stderr.strip()[-2000:]}")
    return json.loads(run.stdout.strip().splitlines()[-1])


def claim_numbers(claims: list[dict[str, Any]]) -> dict[str, float]:
    """Every number the claims carry (value, interval, per-seed values, the controls' too), by its place."""
    skip = {"statement", "paper_value", "verdict", "discriminates", "role", "kind", "direction", "threshold"}

    def walk(x: Any, path: str) -> Iterator[tuple[str, float]]:
        if isinstance(x, dict):
            for k, v in x.items():
                if k not in skip:
                    yield from walk(v, f"{path}.{k}")
        elif isinstance(x, list):
            for i, v in enumerate(x):
                yield from walk(v, f"{path}[{i}]")
        elif isinstance(x, (int, float)) and not isinstance(x, bool):
            yield path, float(x)

    return dict(pair for c in claims for pair in walk(c, c["id"]))


def unequal(got: dict[str, float], stored: dict[str, float]) -> list[str]:
    """The places whose numbers are not bit-equal (NaN equals NaN), or are missing on either side."""
    same = lambda a, b: a == b or (a != a and b != b)  # noqa: E731
    return sorted(k for k in set(got) | set(stored) if k not in got or k not in stored or not same(got[k], stored[k]))
