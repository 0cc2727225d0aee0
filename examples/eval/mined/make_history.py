"""Build a small repository with a real history to mine: five bug fixes, each with the test
that proves it, and commits that are not fixes (a README change, a refactor whose tests
pass before and after).

    python examples/eval/mined/make_history.py /tmp/textkit
    loop eval mine /tmp/textkit --out /tmp/mined-textkit

Each fix below is a real one: the code before it is wrong in the way its test shows.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

GIT = ["git", "-c", "user.name=Textkit", "-c", "user.email=textkit@localhost",
       "-c", "commit.gpgsign=false"]  # fmt: skip

START = {
    "README.md": "# textkit\n\nSmall text helpers.\n",
    "textkit/__init__.py": "",
    "textkit/slug.py": ("def slugify(text):\n    return text.lower().replace(' ', '-')\n"),
    "textkit/numbers.py": (
        "def clamp(value, low, high):\n"
        "    if value < low:\n"
        "        return low\n"
        "    if value > high + 1:\n"
        "        return high\n"
        "    return value\n"
    ),
    "textkit/words.py": (
        "def _split(text):\n"
        "    return text.split(' ')\n"
        "\n\n"
        "def count_words(text):\n"
        "    return len(_split(text))\n"
    ),
    "textkit/title.py": ("def title_case(text):\n    return text.title()\n"),
    "textkit/money.py": (
        "def cents(amount):\n"
        "    units, cents = divmod(amount, 100)\n"
        "    return f'{units}.{cents}'\n"
    ),
    "tests/__init__.py": "",
    "tests/test_basics.py": (
        "from textkit.numbers import clamp\n"
        "from textkit.slug import slugify\n"
        "from textkit.words import count_words\n"
        "\n\n"
        "def test_slug_spaces():\n"
        "    assert slugify('a b') == 'a-b'\n"
        "\n\n"
        "def test_clamp_inside():\n"
        "    assert clamp(5, 0, 10) == 5\n"
        "\n\n"
        "def test_count_words():\n"
        "    assert count_words('one two') == 2\n"
    ),
}

HISTORY: list[tuple[str, dict[str, str]]] = [
    (
        "Strip punctuation from slugs\n\nslugify('Hello, World!') gave 'hello,-world!'.",
        {
            "textkit/slug.py": (
                "import re\n\n\n"
                "def slugify(text):\n"
                "    return '-'.join(re.findall(r'[a-z0-9]+', text.lower()))\n"
            ),
            "tests/test_slug.py": (
                "from textkit.slug import slugify\n\n\n"
                "def test_punctuation():\n"
                "    assert slugify('Hello, World!') == 'hello-world'\n"
            ),
        },
    ),
    ("Say what textkit is for", {"README.md": "# textkit\n\nSmall, tested text helpers.\n"}),
    (
        "clamp lets values just above the bound through\n\nclamp(11, 0, 10) returned 11.",
        {
            "textkit/numbers.py": (
                "def clamp(value, low, high):\n    return max(low, min(value, high))\n"
            ),
            "tests/test_numbers.py": (
                "from textkit.numbers import clamp\n\n\n"
                "def test_just_above():\n"
                "    assert clamp(11, 0, 10) == 10\n\n\n"
                "def test_below():\n"
                "    assert clamp(-1, 0, 10) == 0\n"
            ),
        },
    ),
    (
        "Name the word splitter for what it does",
        {
            "textkit/words.py": (
                "def _words_of(text):\n"
                "    return text.split(' ')\n"
                "\n\n"
                "def count_words(text):\n"
                "    return len(_words_of(text))\n"
            ),
            "tests/test_words.py": (
                "from textkit.words import count_words\n\n\n"
                "def test_one_word():\n"
                "    assert count_words('one') == 1\n"
            ),
        },
    ),
    (
        "Count words across runs of spaces\n\ncount_words('a  b') gave 3.",
        {
            "textkit/words.py": (
                "def _words_of(text):\n"
                "    return text.split()\n"
                "\n\n"
                "def count_words(text):\n"
                "    return len(_words_of(text))\n"
            ),
            "tests/test_words.py": (
                "from textkit.words import count_words\n\n\n"
                "def test_one_word():\n"
                "    assert count_words('one') == 1\n\n\n"
                "def test_double_spaces():\n"
                "    assert count_words('a  b') == 2\n"
            ),
        },
    ),
    (
        'Title case keeps apostrophes inside words\n\ntitle_case("don\'t") gave "Don\'T".',
        {
            "textkit/title.py": (
                "def title_case(text):\n"
                "    return ' '.join(w[:1].upper() + w[1:].lower() for w in text.split(' '))\n"
            ),
            "tests/test_title.py": (
                "from textkit.title import title_case\n\n\n"
                "def test_apostrophe():\n"
                '    assert title_case("don\'t stop") == "Don\'t Stop"\n'
            ),
        },
    ),
    (
        "Pad cents to two digits\n\ncents(105) gave '1.5'.",
        {
            "textkit/money.py": (
                "def cents(amount):\n"
                "    units, cents = divmod(amount, 100)\n"
                "    return f'{units}.{cents:02d}'\n"
            ),
            "tests/test_money.py": (
                "from textkit.money import cents\n\n\n"
                "def test_small_cents():\n"
                "    assert cents(105) == '1.05'\n\n\n"
                "def test_round():\n"
                "    assert cents(200) == '2.00'\n"
            ),
        },
    ),
]
"""Oldest first: five fixes (each with its failing test), a README change, a refactor."""


def git(repo: Path, *args: str) -> str:
    env = dict(os.environ, GIT_AUTHOR_DATE="2024-01-01T00:00:00Z",
               GIT_COMMITTER_DATE="2024-01-01T00:00:00Z")  # fmt: skip
    done = subprocess.run([*GIT, *args], cwd=repo, env=env, check=True, capture_output=True,
                          text=True)  # fmt: skip
    return done.stdout.strip()


def write(repo: Path, files: dict[str, str]) -> None:
    for path, text in files.items():
        target = repo / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)


def build(repo: Path) -> list[str]:
    """The repository at ``repo`` (made anew); returns its commits, oldest first."""
    if repo.exists() and any(repo.iterdir()):
        raise SystemExit(f"{repo} is not empty")
    repo.mkdir(parents=True, exist_ok=True)
    git(repo, "init", "-q", "-b", "main")
    write(repo, START)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "textkit: slugify, clamp, count_words, title_case, cents")
    commits = [git(repo, "rev-parse", "HEAD")]
    for message, files in HISTORY:
        write(repo, files)
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", message)
        commits.append(git(repo, "rev-parse", "HEAD"))
    return commits


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: make_history.py FOLDER")
    made = build(Path(sys.argv[1]).resolve())
    print(f"{len(made)} commits in {sys.argv[1]}")
