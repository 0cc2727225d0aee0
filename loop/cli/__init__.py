"""The ``loop`` command line: the top layer, which nothing else imports."""


def main() -> None:
    """Entry point of the ``loop`` script."""
    from loop.cli.app import main as run

    run()
