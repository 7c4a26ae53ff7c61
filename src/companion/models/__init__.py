"""Shared small models used by more than one paper."""
