"""A reproducible companion to ICML 2025 papers: shared library, runner and claim checks."""

from importlib import metadata

try:
    __version__ = metadata.version("companion")
except metadata.PackageNotFoundError:
    __version__ = "0+unknown"
