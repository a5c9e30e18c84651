-- Task types whose leasing an operator paused (issue 39): enqueue still
-- accepts their tasks, lease calls skip them until they are resumed. A row
-- of its own rather than a field of the task type's body, so that a PUT of
-- the type does not resume it and every host reads the same pause.
CREATE TABLE task_type_pauses (
    tenant    TEXT    NOT NULL,
    task_type TEXT    NOT NULL,
    paused_by TEXT    NOT NULL,
    paused_at INTEGER NOT NULL,
    reason    TEXT    NOT NULL DEFAULT '',
    PRIMARY KEY (tenant, task_type)
);
