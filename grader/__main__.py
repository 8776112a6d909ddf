"""``python -m grader``: see grader/cli.py."""

from grader.cli import run

run()
