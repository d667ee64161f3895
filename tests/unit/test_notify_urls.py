"""A ``notify:`` URL that ``urllib`` cannot even split (a fuzzing find: ``http://[``) is a
``PolicyError`` naming the file and the line, like every other bad URL; never a bare
``ValueError``."""

from __future__ import annotations

import pytest

from ctrlrun.config import load_policy_file, load_policy_text
from ctrlrun.errors import InvalidArgument, PolicyError
from ctrlrun.kernel.notify import NotifyTarget

POLICY = """\
schema: ctrlrun.policy/v1
actions:
  crm.read:
    decision: allow
notify:
  - name: ops
    url: {url!r}
    secret_env: OPS_SECRET
"""

BROKEN = [
    "http://[",
    "http://[::1",
    "https://[zz]/",
    "http://x:99999/",
    "http://x:port/",
    "http://x:0/",
]


@pytest.mark.parametrize("url", BROKEN)
def test_a_url_urllib_cannot_split_is_a_policy_error_with_file_and_line(tmp_path, url):
    path = tmp_path / "ctrlrun.yaml"
    path.write_text(POLICY.format(url=url))
    with pytest.raises(PolicyError) as refused:
        load_policy_file(path)
    assert refused.value.path == str(path)
    assert refused.value.line == 5  # the notify section, like every other notify refusal
    assert f"{path}:5: notify" in str(refused.value)


@pytest.mark.parametrize("url", BROKEN)
def test_the_target_itself_refuses_it_as_invalid_argument(url):
    with pytest.raises(InvalidArgument):
        NotifyTarget("ops", url, "OPS_SECRET")


def test_good_urls_still_load():
    for url in ("https://hooks.example/x", "http://[::1]:8080/hook", "http://127.0.0.1:9/"):
        assert load_policy_text(POLICY.format(url=url)).notify[0].url == url
