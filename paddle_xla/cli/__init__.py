"""`paddle-xla`, the command line (main.py), and the jobs it runs: demo, bench, validate."""
