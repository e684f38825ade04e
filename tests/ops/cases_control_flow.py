"""pd_op.if / pd_op.while / cf.yield need Layers with tensor-dependent Python control flow; their
parity tests are in tests/test_control_flow.py."""
CASES = []
COVERED = ["pd_op.if", "pd_op.while", "cf.yield"]
