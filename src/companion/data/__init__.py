"""Synthetic data generators and loaders of data bundled in pip packages."""
