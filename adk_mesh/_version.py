"""The version of adk-mesh (its own module: reading it loads nothing else)."""

__version__ = "0.1.0"
