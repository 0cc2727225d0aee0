"""Slack as a place to answer tasks: Block Kit shapes (``blocks``) and the Web API
client the worker and ``loop ui`` share (``api``). See docs/guides/slack.md."""
