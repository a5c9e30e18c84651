-- A schedule's receipts (issue 39) are listed by schedule id
-- (GET /v1/schedules/{id}/receipts). Every schedule.* receipt names its
-- schedule in its body, which the gate writes compact with sorted keys, so
-- the id is the 28 characters after the first "schedule_id":" (a string
-- value holds its quotes escaped). The index is partial: no other receipt
-- pays for it. The expression reads the text, not JSON: a body with an
-- escaped NUL is valid JSON that jsonb refuses, and an index expression
-- that fails would refuse the receipt.
CREATE INDEX receipts_schedule ON receipts (tenant, substr(body, instr(body, '"schedule_id":"') + 15, 28), seq)
    WHERE substr(type, 1, 9) = 'schedule.';
-- The last fires a schedule skipped, and why (GET /v1/schedules/{id}
-- last_skip): JSON, '' for none.
ALTER TABLE schedules ADD COLUMN last_skip TEXT NOT NULL DEFAULT '';
