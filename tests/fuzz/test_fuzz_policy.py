"""The policy loader and effect-key templates under hostile text: a ``Policy`` or a
``PolicyError`` (templates: a ``Template`` or ``InvalidArgument``, a key or
``EffectKeyError``), nothing else; a refusal always names where."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ctrlrun.config import load_policy_text
from ctrlrun.errors import EffectKeyError, InvalidArgument, PolicyError
from ctrlrun.kernel.template import Template
from support.fuzzing import budget
from support.policies import POLICY

NOTIFY = """\
notify:
  - name: ops
    url: "https://hooks.example/x"
    secret_env: OPS_SECRET
"""
BASE = POLICY + NOTIFY
PIECES = st.sampled_from(
    [
        "{", "}", "[", "]", ":", "- ", "&a", "*a", "!!binary", "<<", "'", '"', "\\", "\t",
        "\n", "  ", "1.5", "0x1F", "yes", "~", "http://[", "{a}{b}", "{a:int}", "\u2028",
        "\x00", "\ud800", "#", "---", "...", "%YAML 1.1", "9" * 50, "é",
    ]
)  # fmt: skip


def mutate(text: str, edits: list[tuple[int, int, str]]) -> str:
    for position, cut, piece in edits:
        at = position % (len(text) + 1)
        text = text[:at] + piece + text[at + cut % 4 :]
    return text


@budget(120)
@given(
    st.lists(
        st.tuples(st.integers(0, 10**4), st.integers(0, 3), PIECES | st.text(max_size=3)),
        min_size=1,
        max_size=4,
    )
)
def test_a_mutated_policy_loads_or_is_a_located_policy_error(edits):
    text = mutate(BASE, edits)
    try:
        load_policy_text(text, source="fuzz.yaml")
    except PolicyError as refused:
        assert str(refused).startswith("fuzz.yaml"), refused


@budget(100)
@given(st.text(max_size=200))
def test_any_text_loads_or_is_a_policy_error(text):
    try:
        load_policy_text(text, source="fuzz.yaml")
    except PolicyError as refused:
        assert str(refused).startswith("fuzz.yaml")


@budget(150)
@given(
    st.text(alphabet=st.sampled_from("{}ab_:int1é-"), max_size=16),
    st.dictionaries(
        st.sampled_from(["a", "b", "ab", "resource", "a_1"]),
        st.none() | st.booleans() | st.integers() | st.text(max_size=4) | st.lists(st.integers()),
    ),
    st.none() | st.text(max_size=4),
)
def test_a_template_parses_and_renders_or_refuses_by_type(source, arguments, resource):
    try:
        template = Template.parse(source)
    except InvalidArgument:
        return
    try:
        key = template.render(arguments, resource)
    except EffectKeyError as refused:
        assert refused.placeholder in template.placeholders
        return
    assert isinstance(key, str) and key
