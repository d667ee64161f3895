"""Policies shared by the tests."""

POLICY = """\
schema: ctrlrun.policy/v1
actions:
  crm.read:
    decision: allow
  stripe.refund:
    effect: "refund:{payment_id}"
    rules:
      - when: {amount_lte: 100000}
        decision: allow
      - when: {amount_lte: 1000000}
        decision: approve
      - decision: deny
  email.send:
    decision: allow
  k8s.namespace.delete:
    decision: approve
    effect: "ns-delete:{name}"
  iam.grant_admin:
    decision: deny
  billing.charge:
    decision: allow
    effect: "charge:{charge_id}"
    max_attempts: 2
"""
