"""pd_op.if / pd_op.while / cf.yield need Layers with tensor-dependent Python control flow; their
parity tests are in tests/test_control_flow.py."""

CASES = []
# NOTE: pd_op.assert is tested in test_errors.py (its effect is an error when its condition is false).
COVERED = ["pd_op.if", "pd_op.while", "cf.yield", "pd_op.assert"]
