"""SCRIPTED EVAL AGENT — not an AI. Stands in for a model so `loop eval` runs offline.

It knows a first guess and a correct fix for each example case. In "careful"
mode it reads LOOP_FEEDBACK_FILE and switches to the correct fix when the
feedback shows its guess failed; in "hasty" mode it repeats its first guess; in
"sure" mode it writes the fix at once.
"""

import json
import os
import pathlib
import sys

FIXES = {
    "slugify.py": (
        "import re\n\n\ndef slugify(text: str) -> str:\n"
        '    return re.sub(r"[^a-z0-9 ]", "", text.lower()).replace(" ", "-")\n',
        "import re\n\n\ndef slugify(text: str) -> str:\n"
        '    return "-".join(re.findall(r"[a-z0-9]+", text.lower()))\n',
    ),
    "clamp.py": (
        "def clamp(x, lo, hi):\n    return max(lo, min(x, hi))\n",
        "def clamp(x, lo, hi):\n    return max(lo, min(x, hi))\n",
    ),
    "wordcount.py": (
        'def word_count(text):\n    return len(text.split(" ")) if text.strip() else 0\n',
        "def word_count(text):\n    return len(text.split())\n",
    ),
}

mode = sys.argv[1]
feedback = os.environ.get("LOOP_FEEDBACK_FILE")
failed_before = bool(feedback) and bool(json.loads(pathlib.Path(feedback).read_text())["failed"])
for name, (guess, fix) in FIXES.items():
    if pathlib.Path(name).exists():
        use_fix = mode == "sure" or (mode == "careful" and failed_before)
        pathlib.Path(name).write_text(fix if use_fix else guess)
        print(f"[scripted {mode}] wrote {'fix' if use_fix else 'first guess'} to {name}")
pathlib.Path(os.environ["LOOP_OUTPUT_FILE"]).write_text("done\n")
