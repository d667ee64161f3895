-- A committed effect names the receipt of the attempt that committed it (issue 28): a
-- duplicate call is refused with that receipt without searching the receipts, which have no
-- index by action (one more entry per call was not worth it). NULL for a record committed
-- before this migration, or by a person's resolution: the receipts are then searched.

ALTER TABLE effects ADD COLUMN committed_receipt_id TEXT;
