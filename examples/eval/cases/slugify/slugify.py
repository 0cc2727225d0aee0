"""Turn titles into URL slugs."""


def slugify(text: str) -> str:
    """Lowercase words of letters and digits, joined by single hyphens."""
    return text.lower().replace(" ", "-")
