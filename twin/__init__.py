"""fabric-twin: a network digital twin for AI-training cluster fabrics."""

__version__ = "0.1.0"
