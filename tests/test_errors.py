"""Bad input gets a paddle_xla error that names the thing and the fix, never an XLA traceback."""
import os

import numpy as np
import paddle
import pytest
from paddle.static import InputSpec

import paddle_xla as px


class TwoInputs(paddle.nn.Layer):
    def __init__(self):
        super().__init__()
        self.fc = paddle.nn.Linear(4, 2)

    def forward(self, x, y):
        return self.fc(x) + y


SPECS = [InputSpec([None, 4], "float32", "x"), InputSpec([None, 2], "float32", "y")]


@pytest.fixture(scope="module")
def model():
    return px.compile(TwoInputs(), SPECS)


def test_missing_feed_names_it(model):
    with pytest.raises(px.FeedError, match=r"Missing input\(s\) \['y'\]"):
        model(np.zeros((3, 4), "float32"))


def test_wrong_rank(model):
    with pytest.raises(px.FeedError, match=r"'x' has rank 1 .* expects rank 2: InputSpec\(\[None,4\]"):
        model(np.zeros((4,), "float32"), np.zeros((4, 2), "float32"))


def test_wrong_fixed_dimension(model):
    with pytest.raises(px.FeedError, match=r"'x' has shape \[3, 5\], but dimension\(s\) \[1\] must be \[4\]"):
        model(np.zeros((3, 5), "float32"), np.zeros((3, 2), "float32"))


def test_wrong_dtype_suggests_cast(model):
    with pytest.raises(px.FeedError, match=r"dtype float64, but the model expects float32.*astype\('float32'\)"):
        model(np.zeros((3, 4)), np.zeros((3, 2), "float32"))


def test_unknown_and_duplicate_names(model):
    with pytest.raises(px.FeedError, match="Unknown input 'z'"):
        model(np.zeros((3, 4), "float32"), z=1)
    with pytest.raises(px.FeedError, match="given twice"):
        model(np.zeros((3, 4), "float32"), x=np.zeros((3, 4), "float32"))


class Unsupported(paddle.nn.Layer):
    def forward(self, x):
        picked = paddle.masked_select(x, x > 0)
        values = paddle.unique(x)
        return picked.sum() + values.sum()


def test_unsupported_ops_reported_all_at_once_with_source_lines():
    report = px.check(Unsupported(), [InputSpec([3, 4], "float32", "x")])
    assert set(report.unsupported) >= {"pd_op.masked_select", "pd_op.unique"}
    with pytest.raises(px.UnsupportedOpsError) as err:
        px.compile(Unsupported(), [InputSpec([3, 4], "float32", "x")])
    text = str(err.value)
    this_file = os.path.basename(__file__)
    assert "pd_op.masked_select" in text and "pd_op.unique" in text
    assert f"{this_file}:" in text and "paddle.masked_select(x, x > 0)" in text
    assert "paddle.unique(x)" in text


def test_unreadable_saved_model(tmp_path):
    with pytest.raises(px.ModelLoadError, match="No saved inference model"):
        px.load_inference_model(str(tmp_path / "nothing"))
    (tmp_path / "m.json").write_text("{ not json")
    (tmp_path / "m.pdiparams").write_bytes(b"\x00\x01")
    with pytest.raises(px.ModelLoadError, match="could not read the saved model"):
        px.load_inference_model(str(tmp_path / "m"))


def test_not_a_model():
    with pytest.raises(TypeError, match="Cannot compile a int"):
        px.compile(3)


def test_capture_failure_is_a_capture_error():
    class NoSpec(paddle.nn.Layer):
        def forward(self, x):
            return x

    with pytest.raises(px.CaptureError, match="input_spec is empty"):
        px.compile(NoSpec(), [])
