-- Budgets: cumulative limits on an action's numeric argument (docs/decisions/0028-budgets.md).
--
-- budget_spend holds, per budget and epoch-aligned tumbling window, the amount spent;
-- budget_charges what each action consumed, so a FAILED attempt (or `resolve --failed`) gives
-- exactly that back, once. An agent writes both only through the two SECURITY DEFINER
-- functions below, called in the call's own transaction and only for budgeted actions.

CREATE TABLE {schema}.budget_spend (
    budget_id    text COLLATE "C" NOT NULL,
    window_start timestamptz NOT NULL,
    spent        bigint NOT NULL CHECK (spent >= 0),
    PRIMARY KEY (budget_id, window_start)
);

CREATE TABLE {schema}.budget_charges (
    action_id    text COLLATE "C" PRIMARY KEY,
    budget_id    text COLLATE "C" NOT NULL,
    window_start timestamptz NOT NULL,
    amount       bigint NOT NULL CHECK (amount >= 0),
    charged_at   timestamptz NOT NULL,
    returned_at  timestamptz
);

-- budget_consume: one conditional upsert (ON CONFLICT locks the row and re-reads the latest
-- committed spent, so concurrent calls are exact); NULL means over budget, nothing written.
CREATE FUNCTION {schema}.ctrlrun_consume_budget(
    p_budget_id text, p_window_start timestamptz, p_amount bigint, p_limit bigint,
    p_force boolean
)
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = {schema}, pg_temp AS $body$
DECLARE
    v_spent bigint;
BEGIN
    IF p_amount IS NULL OR p_amount < 0 OR p_limit IS NULL OR p_limit < 0
       OR p_budget_id IS NULL OR p_window_start IS NULL OR p_force IS NULL THEN
        RAISE EXCEPTION 'ctrlrun: a budget charge needs a budget, a window and amounts from 0'
            USING ERRCODE = 'CR002';
    END IF;
    INSERT INTO {schema}.budget_spend AS b (budget_id, window_start, spent)
    SELECT p_budget_id, p_window_start, p_amount WHERE p_amount <= p_limit OR p_force
    ON CONFLICT (budget_id, window_start) DO UPDATE SET spent = b.spent + excluded.spent
    WHERE b.spent + excluded.spent <= p_limit OR p_force;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    -- The row is this transaction's now (written, locked): its spent is the one just set.
    v_spent := (
        SELECT s.spent FROM {schema}.budget_spend AS s
        WHERE s.budget_id = p_budget_id AND s.window_start = p_window_start
    );
    RETURN v_spent;
END
$body$;

-- budget_charge_insert: what an action consumed, remembered for giving it back.
CREATE FUNCTION {schema}.ctrlrun_charge_budget(
    p_action_id text, p_budget_id text, p_window_start timestamptz, p_amount bigint,
    p_at timestamptz
)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = {schema}, pg_temp AS $body$
BEGIN
    IF p_amount IS NULL OR p_amount < 0 OR p_action_id IS NULL THEN
        RAISE EXCEPTION 'ctrlrun: a budget charge names its action and an amount from 0'
            USING ERRCODE = 'CR002';
    END IF;
    INSERT INTO {schema}.budget_charges (action_id, budget_id, window_start, amount, charged_at)
    VALUES (p_action_id, p_budget_id, p_window_start, p_amount, p_at);
    RETURN true;
END
$body$;

-- budget_return: an action's charge given back, once (a second call changes nothing).
CREATE FUNCTION {schema}.ctrlrun_return_budget(p_action_id text, p_at timestamptz)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = {schema}, pg_temp AS $body$
BEGIN
    UPDATE {schema}.budget_charges SET returned_at = p_at
    WHERE action_id = p_action_id AND returned_at IS NULL;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    UPDATE {schema}.budget_spend AS s SET spent = s.spent - c.amount
    FROM {schema}.budget_charges AS c
    WHERE c.action_id = p_action_id AND s.budget_id = c.budget_id
      AND s.window_start = c.window_start AND s.spent >= c.amount;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'ctrlrun: a budget holds less than the charge it gives back'
            USING ERRCODE = 'CR001';
    END IF;
    RETURN true;
END
$body$;

REVOKE ALL ON FUNCTION {schema}.ctrlrun_consume_budget, {schema}.ctrlrun_charge_budget,
    {schema}.ctrlrun_return_budget
FROM PUBLIC;
