"""Every op case of every table, under jit (as paddle_xla runs it), against native Paddle."""

import importlib
import pkgutil

import pytest

from paddle_xla.ops import supported_ops

from . import harness

# NOTE: tables live in tests/ops/cases_<family>.py, one per lowering family, each exporting CASES.
TABLES = [
    importlib.import_module(f"{__package__}.{m.name}")
    for m in pkgutil.iter_modules([__file__.rsplit("/", 1)[0]])
    if m.name.startswith("cases_")
]
CASES = [c for t in TABLES for c in t.CASES]

# Ops that never appear alone in a Paddle call, or are exercised only through a model test.
NOT_TABLE_TESTED = {"builtin.combine", "builtin.split", "builtin.slice"}


def test_case_ids_unique():
    ids = [c.id for c in CASES]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    assert not dupes, f"duplicate case ids: {dupes}"


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_op_parity(case):
    harness.check_case(case)


PLAIN = [c for c in CASES if c.plain is not None]


@pytest.mark.parametrize("case", PLAIN, ids=[c.id for c in PLAIN])
def test_plain_reference_matches_paddles_kernel(case):
    """The plain-op reference a case falls back to equals Paddle's own kernel wherever that kernel runs."""
    if not harness.own_kernel_runs(case):
        pytest.skip(f"Paddle's CPU kernel for {case.ops} dies with SIGILL on this CPU; nothing to compare")
    xs = harness.inputs(case)
    want = harness.run_paddle(case, xs, 0)[0]
    got = harness.run_paddle(case, xs, 0, case.plain)[0]
    harness.assert_close(case, got, want, "plain reference", case.rtol, case.atol)


def test_every_lowering_has_a_case():
    # NOTE: random ops are tested by statistics in test_random.py; their tables list them in COVERED.
    covered = {op for c in CASES for op in c.ops} | NOT_TABLE_TESTED
    covered |= {op for t in TABLES for op in getattr(t, "COVERED", [])}
    untested = sorted(set(supported_ops()) - covered)
    assert not untested, f"lowerings with no parity case: {untested}"


def test_ignore_index_cases_feed_labels_that_hit_it():
    # NOTE: random labels missed the ignore_index once, so an ignored ignore_index passed every case
    ignoring = [c for c in CASES if "ignore" in c.id and any(a.dtype.startswith("int") for a in c.args)]
    assert ignoring
    random_labels = [
        c.id for c in ignoring if not any(isinstance(a, harness.Values) for a in c.args if a.dtype.startswith("int"))
    ]
    assert not random_labels, f"give these cases labels that hit their ignore_index (harness.Values): {random_labels}"
