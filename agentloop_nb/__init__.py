"""agentloop_nb: kernel-native LLM agents for Jupyter."""

from __future__ import annotations

__version__ = "0.1.0"
