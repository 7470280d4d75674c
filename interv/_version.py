"""interv's version, on the bottom floor: the package face re-exports it, and a saved report
records it (``ReportHeader.interv_version``) without importing the face."""

__all__ = ["__version__"]

__version__ = "0.2.0"
