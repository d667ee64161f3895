"""Two different argument values never render one effect key (decision 0026): typed
placeholders, a separator required between placeholders, and values that cannot hide the
separator that follows them. The rules only refuse; what they accept renders as before."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctrlrun.errors import DenyReason, EffectKeyError, InvalidArgument
from ctrlrun.kernel.template import Template


def rendered(template: Template, arguments: dict) -> str | None:
    try:
        return template.render(arguments)
    except EffectKeyError:
        return None


def test_adjacent_placeholders_are_refused_at_parse():
    with pytest.raises(InvalidArgument, match=r"\{a\} and \{b\} touch"):
        Template.parse("k:{a}{b}")
    with pytest.raises(InvalidArgument, match="touch"):
        Template.parse("{a:int}{b}x")


def test_the_fuzzed_pair_cannot_meet_under_a_separated_template():
    template = Template.parse("k:{a}:{b}")
    assert template.render({"a": "1", "b": "23"}) == "k:1:23"
    assert template.render({"a": "12", "b": "3"}) == "k:12:3"
    assert template.render({"a": "1", "b": "2:3"}) == "k:1:2:3"  # the last value is free
    with pytest.raises(EffectKeyError) as refused:
        template.render({"a": "1:2", "b": "3"})  # would also be k:1:2:3
    assert refused.value.placeholder == "a"
    assert refused.value.reason is DenyReason.EFFECT_KEY_ERROR


def test_a_value_ending_in_part_of_its_separator_is_refused():
    # "xa" + "aa" has "aa" first at 1: decoding would split the key after "x"
    template = Template.parse("{a}aa{b}")
    with pytest.raises(EffectKeyError):
        template.render({"a": "xa", "b": "y"})
    assert template.render({"a": "x", "b": "ay"}) == "xaaay"


def test_an_integer_and_its_text_cannot_share_a_placeholder():
    text, number = Template.parse("refund:{p}"), Template.parse("refund:{p:int}")
    assert text.render({"p": "5"}) == number.render({"p": 5}) == "refund:5"
    with pytest.raises(EffectKeyError, match=r"write \{p:int\}"):
        text.render({"p": 5})
    for value in ("5", True, 5.0):
        with pytest.raises(EffectKeyError, match="must be an integer"):
            number.render({"p": value})


@pytest.mark.parametrize(
    "source", ["k:{a:str}", "k:{a:float}", "k:{a:}", "k:{a}-{a:int}", "k:{resource:int}"]
)
def test_other_types_and_mixed_types_are_refused(source):
    with pytest.raises(InvalidArgument):
        Template.parse(source)


def test_the_shape_drops_types_only():
    assert Template.parse("o:{id:int}/{name}").shape == "o:{id}/{name}"
    assert Template.parse("o:{id}").shape == "o:{id}"


VALUES = st.one_of(
    st.text(alphabet="ab:-12", min_size=1, max_size=4), st.integers(-20, 200), st.booleans()
)
SOURCES = st.lists(
    st.tuples(
        st.text(alphabet="ab:-1", max_size=2),
        st.sampled_from(["{x}", "{y}", "{z}", "{x:int}", "{y:int}"]),
    ),
    min_size=1,
    max_size=3,
).map(lambda parts: "".join(literal + name for literal, name in parts) + "#")


@settings(max_examples=300, deadline=None)
@given(SOURCES, st.data())
def test_no_two_different_argument_values_render_one_key(source, data):
    try:
        template = Template.parse(source)
    except InvalidArgument:
        return  # touching placeholders, or one name with two types
    names = sorted(set(template.placeholders))
    first = {name: data.draw(VALUES, label=f"first {name}") for name in names}
    second = {name: data.draw(VALUES, label=f"second {name}") for name in names}
    one, two = rendered(template, first), rendered(template, second)
    if one is not None and one == two:
        same = all(type(first[n]) is type(second[n]) and first[n] == second[n] for n in names)
        assert same, (source, first, second, one)
