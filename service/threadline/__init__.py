"""threadline: LangGraph conversations whose state survives anything."""

__version__ = "0.1.0"
