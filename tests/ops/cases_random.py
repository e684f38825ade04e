"""Random ops cannot match Paddle number for number; tests/ops/test_random.py checks their shapes,
dtypes and sample statistics instead. COVERED names the lowerings those tests exercise, for the
every-lowering-has-a-case check."""

CASES = []

COVERED = [
    "pd_op.uniform",
    "pd_op.gaussian",
    "pd_op.truncated_gaussian_random",
    "pd_op.randint",
    "pd_op.randperm",
    "pd_op.bernoulli",
    "pd_op.binomial",
    "pd_op.poisson",
    "pd_op.exponential_",
    "pd_op.standard_gamma",
    "pd_op.dirichlet",
    "pd_op.multinomial",
]
