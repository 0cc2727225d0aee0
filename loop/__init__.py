"""Loopwork: AI coding agents in durable, verified loops on Temporal."""

__version__ = "0.1.0"
