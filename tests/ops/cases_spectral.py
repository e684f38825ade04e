"""paddle.signal.frame, paddle.fft and the complex parts; outputs made real (abs / real / imag) so
that values and gradients compare as floats."""

import paddle

from .harness import Arg, OpCase

SIG = Arg((2, 40))

CASES = [
    OpCase("frame_last", lambda x: paddle.signal.frame(x, 8, 4), [SIG], ["pd_op.frame"]),
    OpCase("frame_first", lambda x: paddle.signal.frame(x, 6, 5, axis=0), [Arg((30, 3))], ["pd_op.frame"]),
    OpCase("frame_f64", lambda x: paddle.signal.frame(x, 16, 16), [Arg((3, 50), "float64")], ["pd_op.frame"]),
    OpCase(
        "rfft_abs",
        lambda x: paddle.abs(paddle.fft.rfft(x)),
        [SIG],
        ["pd_op.fft_r2c", "pd_op.abs"],
        rtol=1e-4,
        atol=1e-5,
    ),
    OpCase(
        "rfft_ortho_parts",
        lambda x: (paddle.real(paddle.fft.rfft(x, norm="ortho")), paddle.imag(paddle.fft.rfft(x, norm="ortho"))),
        [SIG],
        ["pd_op.fft_r2c", "pd_op.real", "pd_op.imag"],
        rtol=1e-4,
        atol=1e-5,
    ),
    OpCase(
        "rfft_n_axis0",
        lambda x: paddle.real(paddle.fft.rfft(x, n=16, axis=0, norm="forward")),
        [Arg((12, 3))],
        ["pd_op.fft_r2c", "pd_op.real"],
        rtol=1e-4,
        atol=1e-5,
    ),
    OpCase(
        "ihfft",
        lambda x: paddle.imag(paddle.fft.ihfft(x)),
        [SIG],
        ["pd_op.fft_r2c", "pd_op.imag"],
        rtol=1e-4,
        atol=1e-5,
    ),
    OpCase(
        "fft_real_input",
        lambda x: paddle.abs(paddle.fft.fft(x)),
        [SIG],
        ["pd_op.fft_r2c", "pd_op.abs"],
        rtol=1e-4,
        atol=1e-5,
    ),
    OpCase(
        "fft2_c2c",
        lambda x: paddle.real(paddle.fft.fft(paddle.fft.rfft(x, axis=0), axis=1)),
        [Arg((8, 6))],
        ["pd_op.fft_c2c", "pd_op.real"],
        rtol=1e-4,
        atol=1e-5,
    ),
    OpCase(
        "ifft_c2c",
        lambda x: paddle.imag(paddle.fft.ifft(paddle.fft.rfft(x), norm="ortho")),
        [SIG],
        ["pd_op.fft_c2c", "pd_op.imag"],
        rtol=1e-4,
        atol=1e-5,
    ),
    OpCase(
        "irfft_roundtrip",
        lambda x: paddle.fft.irfft(paddle.fft.rfft(x), n=40),
        [SIG],
        ["pd_op.fft_c2r"],
        rtol=1e-4,
        atol=1e-5,
    ),
    OpCase(
        "irfft_default_n",
        lambda x: paddle.fft.irfft(paddle.fft.rfft(x, norm="ortho"), norm="ortho"),
        [Arg((2, 9))],
        ["pd_op.fft_c2r"],
        rtol=1e-4,
        atol=1e-5,
    ),
    OpCase(
        "hfft", lambda x: paddle.fft.hfft(paddle.fft.rfft(x)), [Arg((2, 10))], ["pd_op.fft_c2r"], rtol=1e-4, atol=1e-4
    ),
    OpCase(
        "stft_power",
        lambda x: paddle.abs(paddle.fft.rfft(paddle.signal.frame(x, 16, 8), axis=-2)) ** 2,
        [Arg((2, 64))],
        ["pd_op.frame", "pd_op.fft_r2c"],
        rtol=1e-4,
        atol=1e-4,
    ),
]
