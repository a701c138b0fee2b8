"""Reads a file of the shipped tree: the farm's shipping test changes it in a copy of the tree."""

from pathlib import Path


def test_shipped_value():
    value = (Path(__file__).parent / "shipped_value.txt").read_text().strip()
    assert value == "original", f"shipped value: {value}"
