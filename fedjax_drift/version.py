"""The package's version: one place, read by pyproject.toml, the package and run records."""
__version__ = '0.1.0'
