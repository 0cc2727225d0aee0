def word_count(text):
    """Number of words separated by any whitespace."""
    return len(text.split(" "))
