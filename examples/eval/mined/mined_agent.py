"""SCRIPTED MINED-SUITE AGENT — not an AI. Stands in for a model so `loop eval` of a suite
mined from make_history.py runs offline.

It reads the goal from its prompt (the fix's commit message), finds which of the
history's fixes that is, and writes the fixed code: never a test, which it could not see
anyway. In "careful" mode it knows all five; in "hasty" mode it pads cents with one
digit too few. It reports what it "spent" in LOOP_USAGE_FILE, so cost per accepted task
means something.
"""

import json
import os
import pathlib
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_history import HISTORY

mode = sys.argv[1]
prompt = pathlib.Path(os.environ["LOOP_PROMPT_FILE"]).read_text()
for message, files in HISTORY:
    if message.splitlines()[0] not in prompt:
        continue
    for path, text in files.items():
        if path.startswith("tests/"):
            continue  # the fix's tests are hidden; the agent only fixes the code
        if mode == "hasty" and path == "textkit/money.py":
            text = text.replace("{cents:02d}", "{cents}")
        pathlib.Path(path).parent.mkdir(parents=True, exist_ok=True)
        pathlib.Path(path).write_text(text)
        print(f"[scripted {mode}] fixed {path}")
usage = {"tokens_in": 1200, "tokens_out": 300, "cost_usd": 0.002 if mode == "careful" else 0.001}
pathlib.Path(os.environ["LOOP_USAGE_FILE"]).write_text(json.dumps(usage))
pathlib.Path(os.environ["LOOP_OUTPUT_FILE"]).write_text("fixed\n")
