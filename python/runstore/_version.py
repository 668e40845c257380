"""The package's version, as pyproject.toml gives it (and metadata.json of an export records)."""

__version__ = "0.1.0"
