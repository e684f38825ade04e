"""The layout planner: which Strategy fits a model on which devices, and how fast it would run.

  profiles.py   device profiles (memory, FLOP rates, links), each figure with its source
  costs.py      what a captured program costs, measured from an abstract trace (no compile)
  search.py     every runnable layout predicted and ranked

  perf.py       the measured matmul peak and analytic BERT FLOPs (paddle-xla bench, benchmarks/)

px.plan (api/planning.py) captures a model for it. Paddle-free."""
