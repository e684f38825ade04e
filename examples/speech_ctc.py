"""Speech: log-mel features from paddle.audio and a BiLSTM trained with CTC, on synthetic "speech".

    python examples/speech_ctc.py          # 12 symbols, 1.5 s utterances, 2-layer BiLSTM
    python examples/speech_ctc.py --tiny   # 6 symbols, 0.8 s, 1 layer (CI)

Each symbol is a tone of its own pitch; an utterance is up to a few of them with silences between, in
noise, generated here (no download). The model must read the symbol sequence from the audio without
being told where each symbol is: that is what CTC (F.ctc_loss) learns.

1. Log-mel features with paddle.audio.features.LogMelSpectrogram, compiled by paddle_xla when its ops
   lower, else computed natively in Paddle as a data step (the script says which).
2. Train nn.LSTM + F.ctc_loss with px.train_step; train a copy natively in Paddle on the same batches
   from the same weights for a few steps, and compare the losses.
3. Decode held-out utterances greedily (best path) and report the symbol error rate.
"""

import argparse
import copy
import time

import numpy as np
import paddle
from paddle.static import InputSpec

import paddle_xla as px
from paddle_xla.models.speech import LSTMCTC, SpeechConfig, ctc_loss, edit_distance, greedy_decode, tones

CONFIGS = {
    "tiny": dict(model="tiny", train=512, test=128, batch=16, epochs=8, lr=5e-3, compare=4),
    "full": dict(model="small", train=4096, test=512, batch=64, epochs=5, lr=3e-3, compare=4),
}


def featurizer(cfg):
    """A function [N, samples] -> log-mel [N, frames, n_mels]."""
    extractor = cfg.log_mel()
    spec = [InputSpec([None, cfg.n_samples], "float32", "audio")]
    report = px.check(extractor, spec)
    if report.ok:
        print("log-mel features: compiled by paddle_xla")
        run = px.compile(extractor, spec)
    else:
        # NOTE: a data step, once before training: the features need no gradient, so running them
        # natively costs nothing in the training loop.
        print(f"log-mel features: computed natively in Paddle (no lowering yet for {report.unsupported})")
        run = lambda audio: extractor(paddle.to_tensor(audio)).numpy()  # noqa: E731
    return lambda audio: np.ascontiguousarray(run(audio).transpose(0, 2, 1))


def batches(feats, utts, cfg, batch):
    """(feats, labels, input_lengths, label_lengths) per batch, in order."""
    for i in range(0, len(feats) - batch + 1, batch):
        s = slice(i, i + batch)
        yield feats[s], utts.labels[s], np.full(batch, cfg.n_frames, "int64"), utts.label_lengths[s]


def optimizer(net, c):
    return paddle.optimizer.Adam(c["lr"], parameters=net.parameters(), grad_clip=paddle.nn.ClipGradByGlobalNorm(5.0))


def native_losses(net, data, c):
    opt, losses = optimizer(net, c), []
    for b in data:
        loss = ctc_loss(net(paddle.to_tensor(b[0])), *[paddle.to_tensor(x) for x in b[1:]])
        loss.backward()
        opt.step()
        opt.clear_grad()
        losses.append(float(loss))
    return losses


def symbol_error_rate(model, feats, utts):
    hyps = greedy_decode(model(feats))
    refs = [utts.symbols(i) for i in range(len(hyps))]
    errors = sum(edit_distance(h, r) for h, r in zip(hyps, refs))
    return errors / sum(len(r) for r in refs), float(np.mean([h == r for h, r in zip(hyps, refs)]))


def main(tiny=False, seed=0):
    c = CONFIGS["tiny" if tiny else "full"]
    cfg = SpeechConfig.named(c["model"])
    train, test = tones(cfg, c["train"], seed), tones(cfg, c["test"], seed + 1)
    featurize = featurizer(cfg)
    train_x, test_x = featurize(train.audio), featurize(test.audio)
    print(
        f"{c['train']} training utterances of {cfg.seconds} s: {cfg.n_frames} frames x {cfg.n_mels} mels, "
        f"{cfg.n_symbols} symbols"
    )

    paddle.seed(seed)
    net = LSTMCTC(cfg)
    native = copy.deepcopy(net)  # NOTE: same initial weights for the native comparison
    step = px.train_step(
        net, ctc_loss, optimizer(net, c), LSTMCTC.input_spec(cfg, c["batch"]), LSTMCTC.label_spec(cfg, c["batch"])
    )
    t0, losses = time.perf_counter(), []
    for epoch in range(c["epochs"]):
        losses += [step(*b) for b in batches(train_x, train, cfg, c["batch"])]
        print(f"epoch {epoch}  CTC loss {losses[-1]:.4f}")
    print(f"paddle_xla: {len(losses)} steps in {time.perf_counter() - t0:.1f} s")
    step.sync_to(net)

    ref = native_losses(native, list(batches(train_x, train, cfg, c["batch"]))[: c["compare"]], c)
    rel = max(abs(a - b) / abs(b) for a, b in zip(losses, ref))
    print(f"paddle_xla vs native Paddle, first {len(ref)} steps: max relative loss difference {rel:.2e}")

    net.eval()
    ser, exact = symbol_error_rate(px.compile(net, LSTMCTC.input_spec(cfg)), test_x, test)
    print(f"held-out symbol error rate {ser:.3f}; utterances read exactly {exact:.3f}")
    return {"losses": losses, "native_losses": ref, "max_rel_diff": rel, "symbol_error_rate": ser, "exact": exact}


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tiny", action="store_true", help="the small CI configuration")
    main(tiny=p.parse_args().tiny)
