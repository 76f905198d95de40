"""Token bytes to text: split UTF-8 characters and stop strings that span tokens."""

from localchat.runtime.text_output import TextOutput


def feed_all(out: TextOutput, pieces: list[bytes]) -> str:
    return "".join(out.feed(p) for p in pieces) + out.finish()


def test_a_character_split_across_tokens_comes_out_whole():
    data = "café 🙂".encode()
    pieces = [data[:4], data[4:5], data[5:8], data[8:]]
    out = TextOutput([])
    shown = [out.feed(p) for p in pieces]
    assert "".join(shown) + out.finish() == "café 🙂"
    assert all("\ufffd" not in s for s in shown)


def test_stop_string_spanning_tokens_is_cut_and_never_shown():
    out = TextOutput(["END"])
    shown = [out.feed(b"one E"), out.feed(b"N"), out.feed(b"D two")]
    assert shown == ["one ", "", ""]
    assert out.stopped and out.finish() == ""


def test_held_text_that_was_not_a_stop_is_released():
    out = TextOutput(["END"])
    assert out.feed(b"an E") == "an "
    assert out.feed(b"Xtra") == "EXtra"
    assert feed_all(TextOutput(["###"]), [b"a#", b"#"]) == "a##"


def test_earliest_of_several_stops_wins():
    out = TextOutput(["zz", "b"])
    assert out.feed(b"a b zz") == "a "
    assert out.stopped


def test_an_answer_cut_in_the_middle_of_a_character_ends_before_it_not_in_a_replacement_mark():
    data = "Tschüss 🙂".encode()
    out = TextOutput([])
    shown = out.feed(data[:-2])  # Max tokens reached with half of the emoji's bytes written
    assert shown + out.finish() == "Tschüss "
    # A byte that is no UTF-8 at all, in the middle, is still marked where it was.
    assert feed_all(TextOutput([]), [b"a\xffb"]) == "a\ufffdb"
