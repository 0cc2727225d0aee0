import unittest

from wordcount import word_count


class TestWordCount(unittest.TestCase):
    def test_simple(self):
        self.assertEqual(word_count("a b c"), 3)

    def test_runs_of_spaces(self):
        self.assertEqual(word_count("a   b"), 2)

    def test_newlines_and_tabs(self):
        self.assertEqual(word_count("a\nb\tc"), 3)

    def test_empty(self):
        self.assertEqual(word_count("   "), 0)
