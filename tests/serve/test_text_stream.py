"""serve/llm/text.py's TextStream: stop strings cut where they begin (or end, include_stop), the first to begin
winning and, of two that begin at one place, the first listed (vLLM's rule); text that may begin one is held."""

from paddle_xla.serve.llm.text import TextStream

VOCAB = list("abcdefghijklmnopqrstuvwxyz HELO!") + ["HE", "LLO"]


def _run(pieces, stop, include_stop=False, min_tokens=0):
    stream, out = TextStream(lambda ids: "".join(VOCAB[i] for i in ids), stop, include_stop, min_tokens), []
    for piece in pieces:
        out.append(stream.push(VOCAB.index(piece)))
        if stream.stopped:
            break
    return "".join(out) + stream.finish(), stream.stopped


def test_a_stop_string_cuts_where_it_begins_or_where_it_ends():
    assert _run("say HELLO there", ["HELLO"]) == ("say ", True)
    assert _run("say HELLO there", ["HELLO"], include_stop=True) == ("say HELLO", True)
    assert _run("say HEL", ["HELLO"]) == ("say HEL", False)  # NOTE: held back, then sent at the end


def test_of_two_stop_strings_the_first_to_begin_and_then_the_first_listed_wins():
    assert _run("ab HELLO", ["LO", "HEL"], include_stop=True) == ("ab HEL", True)
    # NOTE: one token ("LLO") completes both: the one listed first is the one kept
    pieces = ["a", "b", " ", "HE", "LLO", "!"]
    assert _run(pieces, ["HELLO", "HELL"], include_stop=True) == ("ab HELLO", True)
    assert _run(pieces, ["HELL", "HELLO"], include_stop=True) == ("ab HELL", True)
    assert _run(pieces, ["HELL", "HELLO"]) == ("ab ", True)


def test_no_stop_string_ends_the_text_before_min_tokens():
    # NOTE: the first "!" is the 2nd token, before min_tokens=3: it is text; the second one ends it
    assert _run("a!b!c", ["!"], min_tokens=3) == ("a!b", True)
    assert _run("a!b!c", ["!"]) == ("a", True)
    assert _run("HELLO HELLO", ["HELLO"], min_tokens=4) == ("HELLO ", True)
