"""`python -m paddle_xla.cli ...` runs the `paddle-xla` command."""

from .main import main

main()
