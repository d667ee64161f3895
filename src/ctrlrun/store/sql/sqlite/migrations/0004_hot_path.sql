-- The protected call's hot tables keep only the indexes a write needs.
--
-- Every index on a table a protected call writes is one more page in every commit's WAL
-- frames: events_by_action cost a page in both transactions of every call, and
-- receipts_by_action one in the second, a fifth of the pages a call writes. Looking events or
-- receipts up by action is an operator's occasional read (`ctrlrun inspect`, which already
-- scans every event for the approvals an action used), like listing effects by state
-- (0001_baseline). See docs/decisions/0005-sqlite-hot-path.md.

DROP INDEX events_by_action;

DROP INDEX receipts_by_action;
