-- ctrlrun Postgres schema: the guard that lets a conditional write travel in the same message
-- as its COMMIT (docs/decisions/0006-postgres-round-trips.md). {schema} is composed as an
-- identifier. Applied in one transaction together with its schema_version row.
--
-- ctrlrun_expect_one(n) returns n when it is 1 and otherwise raises SQLSTATE CR001. A folded
-- statement passes it the row count of its conditional write; when the write matched no row,
-- the error makes the server skip the rest of the message, COMMIT included, so nothing the
-- transaction did commits. The client sees CR001 with the transaction failed (INERROR): the
-- failed row, never the unknown one, and it re-decides on the planner's path.

CREATE FUNCTION {schema}.ctrlrun_expect_one(matched bigint) RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $body$
BEGIN
    IF matched IS NULL OR matched <> 1 THEN
        RAISE EXCEPTION 'ctrlrun: a folded conditional write matched no row'
            USING ERRCODE = 'CR001';
    END IF;
    RETURN matched;
END
$body$;
