import unittest

from slugify import slugify


class TestSlugify(unittest.TestCase):
    def test_plain_words(self):
        self.assertEqual(slugify("Hello World"), "hello-world")

    def test_punctuation(self):
        self.assertEqual(slugify("Hello, World!"), "hello-world")

    def test_runs_of_spaces(self):
        self.assertEqual(slugify("  many   spaces "), "many-spaces")


if __name__ == "__main__":
    unittest.main()
