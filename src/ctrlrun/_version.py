"""The version of this ctrlrun build."""

__version__ = "0.1.0"
