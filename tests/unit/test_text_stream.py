from superfluid.application.text import TextStream

PIECES = {
    1: b"Hel",
    2: b"lo",
    3: "é".encode()[:1],
    4: "é".encode()[1:],
    5: b" END",
    6: b"!",
}


def detok(tokens):
    return b"".join(PIECES[t] for t in tokens)


def test_a_character_split_across_tokens_is_never_emitted_half_way():
    stream = TextStream(detok)
    assert stream.push([1, 2]) == "Hello"
    assert stream.push([3]) == ""
    assert stream.push([4]) == "é"
    assert stream.finish() == ""


def test_a_stop_string_cuts_the_text_and_ends_the_stream():
    stream = TextStream(detok, stops=[" END"])
    assert stream.push([1, 2, 5, 6]) == "Hello"
    assert stream.stopped
    assert stream.push([6]) == "" and stream.finish() == ""


def test_a_possible_stop_prefix_is_held_back_until_it_is_known():
    stream = TextStream(detok, stops=["lo!"])
    assert stream.push([1]) == "He"  # "l" may begin "lo!"
    assert stream.push([2]) == "l"  # and so may "lo"
    assert stream.push([6]) == ""
    assert stream.stopped


def test_held_text_is_released_when_it_turns_out_not_to_be_a_stop():
    stream = TextStream(detok, stops=["lo?"])
    assert stream.push([1, 2]) == "Hel"
    assert stream.push([6]) == "lo!"
    assert stream.finish() == ""


def test_finish_flushes_held_text_and_an_incomplete_character():
    stream = TextStream(detok, stops=["lo?"])
    assert stream.push([1, 2, 3]) == "Hel"
    assert stream.finish() == "lo\ufffd"
