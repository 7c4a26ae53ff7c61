"""The numerics profile: CPU code paths pinned so that a seed gives the same bits on any x86-64
machine with AVX2, whatever its vendor or its wider vector units. That is the aim, not yet met for every
paper: re-run on an Intel Xeon, records stored on an AMD EPYC under this profile reproduce bit for bit for
some papers and not for others (the README gives which).

What no variable here can pin (found by emulation, ``companion numerics --emulate EPYC-Rome``): MKL's
vector math (``vsSqrt``, ``vsAcos``, ``vsAsin``, ``vsAtan``, ``vsLog10``), which ATen's ``sqrt``,
``acos``, ``asin``, ``atan`` and ``log10`` call, refines the CPU's approximate reciprocal (``rsqrtps``,
``rcpps``) on its generic code path, and each vendor implements those instructions with other bits. MKL
takes that path on every AMD CPU whatever ``MKL_CBWR`` says, and on an Intel CPU under ``COMPATIBLE``.
torch's default Adam takes its square roots there, so the same seed trains another network on another
vendor's CPU. Code that must reproduce across vendors avoids these kernels: ``companion.models.optim``
(Adam and AdamW through torch's fused kernel, whose square root is the IEEE one), ``cdist`` without its
matrix-product path; ``fingerprint.vendor_dependent_calls`` counts what a run still calls.

Small models amplify the last bit of a matrix product into a different training trajectory, so a
record stored on an Intel machine with AVX-512 did not reproduce on an AMD EPYC with AVX2 (same seed,
same versions: fr-geometry's ``aug-energy-up`` per-seed values 0.247/0.265/0.361 there against
0.316/0.109/0.318 here). Each library picks its kernels by the CPU it finds; the profile takes the
choice away from it. Chosen by measurement on an AMD EPYC (Zen 3, AVX2, no AVX-512) with torch
2.13.0+cpu, MKL 2024.2 and numpy 2.4.6:

- ``ATEN_CPU_CAPABILITY=avx2``: torch's own vectorised kernels (elementwise ops, reductions, softmax,
  GELU) exist for default/avx2/avx512; unpinned, an AVX-512 CPU takes the avx512 ones. Setting
  ``default`` here changed a small training's weights, so the choice is real on this machine too.
- ``MKL_CBWR=COMPATIBLE``: MKL's conditional numerical reproducibility. On this AMD CPU the AVX2, AVX
  and SSE4_2 branches gave bit-identical results to MKL's own choice (MKL ignores them on a non-Intel
  CPU), so only ``COMPATIBLE``, the one branch defined for every x86 vendor, pins the code path that an
  Intel CPU would otherwise replace with its AVX-512 one. oneMKL's developer guide says the same: on a
  non-Intel CPU a named branch such as AVX2 falls back to AUTO, and results may differ. It costs time: a
  2-layer GPT-2 trains 1.6x slower and a 256 x 256 sgemm is 3.3x slower on this machine (2.2x for the
  GPT-2 on an Intel Xeon, where the AVX2 branch would cost 1.3x).
- ``ONEDNN_MAX_CPU_ISA=AVX2``: oneDNN (convolutions) JIT-compiles for the widest ISA it finds.
- ``NPY_DISABLE_CPU_FEATURES``: numpy dispatches exp, tanh, sorting and friends to AVX-512 (X86_V4)
  kernels where it can; these names disable them and are accepted on a CPU without them.
- ``OPENBLAS_CORETYPE=Haswell``: numpy's and scipy's OpenBLAS (DYNAMIC_ARCH) picks a kernel per CPU
  (SkylakeX uses AVX-512); Haswell is the AVX2 kernel. Some machines set this variable because an
  OpenBLAS build misbehaves on their CPU; a value already set is kept (:func:`profile_for`).

:func:`apply` sets the profile in this process's environment before any numerical library loads;
every kernel, Dask worker and ``parallel_map`` process the companion starts inherits it, and the
``companion`` Jupyter kernelspec carries it. The profile is recorded in each record's provenance and
joins the cache key. Other architectures (arm64) have other kernels: the profile does not apply there.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Mapping, MutableMapping

PROFILE: dict[str, str] = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "MKL_CBWR": "COMPATIBLE",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL AVX512_SPR",
    "OPENBLAS_CORETYPE": "Haswell",
}
# A machine that sets these has its own reason (an OpenBLAS build that crashes on its CPU).
KEPT_IF_SET = frozenset({"OPENBLAS_CORETYPE"})
OFF_ENV = "COMPANION_NUMERICS"  # "off" leaves every library free to choose (for measuring the cost)


def applies() -> bool:
    """Whether the profile applies here: an x86-64 machine, and not switched off."""
    return platform.machine().lower() in ("x86_64", "amd64") and os.environ.get(OFF_ENV, "") != "off"


def profile_for(environ: Mapping[str, str]) -> dict[str, str]:
    """The profile as it takes effect under ``environ`` (a machine's own OPENBLAS_CORETYPE is kept)."""
    if not applies():
        return {}
    return {name: environ[name] if name in KEPT_IF_SET and environ.get(name) else value
            for name, value in PROFILE.items()}


def apply(environ: MutableMapping[str, str] | None = None) -> dict[str, str]:
    """Set the profile in ``environ`` (default: this process's) and return what was set."""
    environ = os.environ if environ is None else environ
    chosen = profile_for(environ)
    environ.update(chosen)
    return chosen


def active() -> dict[str, str]:
    """The profile variables as this process sees them (what a record's provenance carries)."""
    return {name: os.environ[name] for name in PROFILE if name in os.environ}


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``; the platform's processor string elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main(argv: list[str] | None = None) -> int:
    """``python -m companion.numerics CMD ...``: run CMD under the profile (nbval's kernels, say)."""
    import sys

    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        print("usage: python -m companion.numerics CMD [ARG ...]  (runs CMD under the numerics profile)",
              file=sys.stderr)
        return 2
    apply()
    os.execvp(argv[0], argv)
    return 0  # not reached: exec replaces this process


if __name__ == "__main__":
    raise SystemExit(main())
