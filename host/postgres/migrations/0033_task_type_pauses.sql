-- Task types whose leasing an operator paused (issue 39): enqueue still
-- accepts their tasks, lease calls skip them until they are resumed. A row
-- of its own rather than a field of the task type's body, so that a PUT of
-- the type does not resume it and every host reads the same pause.
CREATE TABLE task_type_pauses (
    tenant    text    NOT NULL,
    task_type text    NOT NULL,
    paused_by text    NOT NULL,
    paused_at bigint  NOT NULL,
    reason    text    NOT NULL DEFAULT '',
    PRIMARY KEY (tenant, task_type)
);
