"""SCRIPTED DEMO AGENT — not an AI. It stands in for Claude Code, Codex CLI or aider.

It follows Loopwork's command agent protocol so the demo runs offline: on
attempt 1 it makes a plausible but incomplete fix (punctuation only); on later
attempts it reads LOOP_FEEDBACK_FILE, finds which test failed, and fixes that.
"""

import json
import os
import pathlib

INCOMPLETE = '''"""Turn titles into URL slugs."""

import re


def slugify(text: str) -> str:
    """Lowercase words of letters and digits, joined by single hyphens."""
    return re.sub(r"[^a-z0-9 ]", "", text.lower()).replace(" ", "-")
'''

COMPLETE = '''"""Turn titles into URL slugs."""

import re


def slugify(text: str) -> str:
    """Lowercase words of letters and digits, joined by single hyphens."""
    return "-".join(re.findall(r"[a-z0-9]+", text.lower()))
'''

attempt = int(os.environ["LOOP_ATTEMPT"])
prompt = pathlib.Path(os.environ["LOOP_PROMPT_FILE"]).read_text()
print(f"[scripted agent] attempt {attempt}; read {len(prompt)} characters of prompt")

feedback_file = os.environ.get("LOOP_FEEDBACK_FILE")
if feedback_file:
    feedback = json.loads(pathlib.Path(feedback_file).read_text())
    failed = [f["gate"] for f in feedback["failed"]]
    evidence = " ".join(f["evidence"]["output_tail"] for f in feedback["failed"])
    print(f"[scripted agent] feedback: failed gates {failed}")
    fix = COMPLETE if "test_runs_of_spaces" in evidence else INCOMPLETE
    claim = "Collapsed runs of separators into single hyphens, as the failing test demanded."
else:
    fix = INCOMPLETE
    claim = "Removed punctuation from slugs. All tests should pass now."  # over-confident

pathlib.Path("slugify.py").write_text(fix)
pathlib.Path(os.environ["LOOP_OUTPUT_FILE"]).write_text(claim + "\n")
print(f"[scripted agent] wrote slugify.py; claim: {claim}")
