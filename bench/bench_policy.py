"""The one policy every benchmark runs under (SQLite and Postgres alike), so both measure the
same decisions: an allowed call with an effect key, one without, one that needs an approval,
and the action a plan's steps take."""

POLICY = """\
schema: ctrlrun.policy/v1
actions:
  bench.effect:
    decision: allow
    effect: "bench:{n}"
  bench.read:
    decision: allow
  bench.approved:
    decision: approve
    effect: "approved:{n}"
  bench.step:
    decision: allow
"""
