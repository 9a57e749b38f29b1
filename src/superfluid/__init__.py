"""superfluid: an LLM serving daemon whose speculative decoding never costs output."""

__version__ = "0.1.0"
