-- Budgets: cumulative limits on an action's numeric argument (docs/decisions/0028-budgets.md).
--
-- budget_spend holds, per budget and epoch-aligned tumbling window, the amount spent; a call
-- consumes with one conditional upsert (spent + amount <= limit, or an approval's force), so
-- concurrent calls are exact without a lock table. budget_charges remembers what each action
-- consumed, so a FAILED attempt (or `resolve --failed`) gives exactly that back, once.

CREATE TABLE budget_spend (
    budget_id    TEXT NOT NULL,
    window_start TEXT NOT NULL,
    spent        INTEGER NOT NULL CHECK (spent >= 0),
    PRIMARY KEY (budget_id, window_start)
) WITHOUT ROWID;

CREATE TABLE budget_charges (
    action_id    TEXT PRIMARY KEY,
    budget_id    TEXT NOT NULL,
    window_start TEXT NOT NULL,
    amount       INTEGER NOT NULL CHECK (amount >= 0),
    charged_at   TEXT NOT NULL,
    returned_at  TEXT
) WITHOUT ROWID;

-- A charge given back takes its amount off its window, in the same statement, once.
CREATE TRIGGER budget_charge_returned
AFTER UPDATE OF returned_at ON budget_charges
WHEN OLD.returned_at IS NULL AND NEW.returned_at IS NOT NULL
BEGIN
    UPDATE budget_spend SET spent = spent - NEW.amount
    WHERE budget_id = NEW.budget_id AND window_start = NEW.window_start;
END;
