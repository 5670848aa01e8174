"""`python -m benchfleet` runs the CLI."""

from benchfleet.cli import main

main()
