"""Install the Jupyter kernel ``companion``: this environment's Python, run with the numerics profile.

``python -m companion.kernelspec`` (``make install`` runs it) writes it into this environment
(``sys.prefix``) with the numerics profile as the kernel's environment variables, so a notebook
opened in any Jupyter computes under the profile without setting it itself (on a machine where the
profile does not apply, arm64, the kernel gets none).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

NAME = "companion"
DISPLAY_NAME = "Python (companion)"
# What a stored page names as its kernel, so that Jupyter opens it with this one.
METADATA = {"name": NAME, "display_name": DISPLAY_NAME, "language": "python"}


def profile() -> dict[str, str]:
    """The numerics profile as it takes effect on this machine (a machine's own OPENBLAS_CORETYPE kept)."""
    import os

    from companion import numerics

    return numerics.profile_for(os.environ)


def write(prefix: Path) -> Path:
    """Install the kernelspec under ``prefix``/share/jupyter/kernels and return its folder."""
    from ipykernel.kernelspec import install

    return Path(install(kernel_name=NAME, display_name=DISPLAY_NAME, prefix=str(prefix), env=profile()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m companion.kernelspec", description=__doc__.splitlines()[0])
    parser.add_argument("--prefix", type=Path, default=Path(sys.prefix),
                        help="the environment to install into (default: this one, %(default)s)")
    folder = write(parser.parse_args(argv).prefix)
    print(f"installed the Jupyter kernel {NAME!r} in {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
