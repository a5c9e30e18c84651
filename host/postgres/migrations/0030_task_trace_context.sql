-- A producer's W3C trace context (traceparent, tracestate), kept with the task
-- for the spans of its lease, heartbeats and completion and handed to its
-- worker with the lease (docs/tracing.md). Empty: the task has no trace.
ALTER TABLE tasks ADD COLUMN traceparent text NOT NULL DEFAULT '';
ALTER TABLE tasks ADD COLUMN tracestate text NOT NULL DEFAULT '';
