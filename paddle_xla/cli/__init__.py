"""`paddle-xla`, the command line (main.py), and the jobs it runs: demo.py, bench.py, validate.py, install.py
(`paddle-xla install paddleformers`). Imports paddle where a command captures a model."""
