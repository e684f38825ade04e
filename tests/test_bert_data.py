"""The locally made pretraining data is the same in every process, so `make demo` and
`paddle-xla validate` give the same final loss from run to run."""

import subprocess
import sys

PROBE = """
import hashlib, json
from paddle_xla.models.bert_data import PretrainingData, corpus_sentences, train_tokenizer
sentences = corpus_sentences()
tok = train_tokenizer(sentences, 8000)
batch = PretrainingData(tok, sentences, 64, 512, seed=0).batch(8)
digest = hashlib.sha256(json.dumps(sorted(tok.get_vocab().items())).encode())
for a in batch.as_list():
    digest.update(a.tobytes())
print(digest.hexdigest(), tok.get_vocab_size())
"""


def test_tokenizer_and_batches_are_the_same_in_every_process():
    runs = [
        subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=300) for _ in range(2)
    ]
    for r in runs:
        assert r.returncode == 0, r.stderr[-2000:]
    assert runs[0].stdout == runs[1].stdout
    assert int(runs[0].stdout.split()[1]) > 1000
