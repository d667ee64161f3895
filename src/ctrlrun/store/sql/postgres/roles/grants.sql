-- The three roles' grants (decision 0024; docs/postgres.md "Three roles"), as `ctrlrun grants`
-- prints or applies them, in one transaction, as the store's owner. {schema}, {agent} and
-- {approver} are composed as identifiers (psycopg.sql.Identifier), never formatted as text.
-- Not a migration and not among the named queries (it lives in its own folder): it names
-- roles, which the store never does on its own. Running it again after an upgrade grants
-- what the new schema needs and takes away anything granted since by hand.

-- name: roles_reset
-- Start from nothing: whatever either role held in the schema is taken away first.
REVOKE ALL ON ALL TABLES IN SCHEMA {schema} FROM {agent}, {approver};
REVOKE ALL ON ALL SEQUENCES IN SCHEMA {schema} FROM {agent}, {approver};
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA {schema} FROM {agent}, {approver};
REVOKE ALL ON SCHEMA {schema} FROM {agent}, {approver};
GRANT USAGE ON SCHEMA {schema} TO {agent}, {approver};

-- name: roles_agent
-- The agent's role: protected calls, through the schema's functions only; it reads what a
-- call decides on (a record, a request and its grants, a template, a receipt it re-reads
-- after a lost COMMIT, the reason a person gave for a denial), the schema history its
-- open compares and the receipt chains' heads (their count picks a receipt's partition).
GRANT SELECT ON {schema}.schema_version, {schema}.effects, {schema}.approvals,
    {schema}.approval_grants, {schema}.effect_templates, {schema}.receipts, {schema}.events,
    {schema}.budget_spend, {schema}.budget_charges, {schema}.receipt_chain
TO {agent};
GRANT EXECUTE ON FUNCTION
    {schema}.ctrlrun_reserve_templated, {schema}.ctrlrun_finish_effect,
    {schema}.ctrlrun_record_receipt, {schema}.ctrlrun_append_events,
    {schema}.ctrlrun_insert_effect, {schema}.ctrlrun_renew_effect,
    {schema}.ctrlrun_move_effect, {schema}.ctrlrun_record_template,
    {schema}.ctrlrun_request_approval, {schema}.ctrlrun_consume_approval,
    {schema}.ctrlrun_expire_approval, {schema}.ctrlrun_enqueue_outbox,
    {schema}.ctrlrun_consume_budget, {schema}.ctrlrun_charge_budget,
    {schema}.ctrlrun_return_budget
TO {agent};

-- name: roles_approver
-- The approver's (operator's) role: it reads everything it shows, and answers, resolves and
-- accepts through functions of its own. It may also fold `ctrlrun stats`'s rollup of the
-- receipts (derived from them, rebuilt from them, not evidence).
GRANT SELECT ON ALL TABLES IN SCHEMA {schema} TO {approver};
GRANT INSERT, UPDATE ON {schema}.receipt_stats, {schema}.stats_ambiguous, {schema}.stats_mark
TO {approver};
GRANT EXECUTE ON FUNCTION
    {schema}.ctrlrun_grant_approval, {schema}.ctrlrun_answer_approval,
    {schema}.ctrlrun_lock_approval, {schema}.ctrlrun_expire_approval, {schema}.ctrlrun_move_effect,
    {schema}.ctrlrun_accept_template, {schema}.ctrlrun_append_events,
    {schema}.ctrlrun_return_budget
TO {approver};

-- name: roles_took
-- Read back inside the same transaction: a GRANT by a role that does not own the schema or
-- its objects only warns ("no privileges were granted"), so whether the grants took is asked,
-- not assumed. The schema and the roles are values here.
SELECT pg_catalog.has_schema_privilege(%(agent)s, %(schema)s, 'USAGE')
       AND pg_catalog.has_schema_privilege(%(approver)s, %(schema)s, 'USAGE')
       AND pg_catalog.has_function_privilege(%(agent)s, p.oid, 'EXECUTE')
       AND pg_catalog.has_table_privilege(%(approver)s, c.oid, 'SELECT') AS took
FROM pg_catalog.pg_namespace AS n
JOIN pg_catalog.pg_proc AS p
  ON p.pronamespace = n.oid AND p.proname = 'ctrlrun_reserve_templated'
JOIN pg_catalog.pg_class AS c ON c.relnamespace = n.oid AND c.relname = 'approvals'
WHERE n.nspname = %(schema)s;
