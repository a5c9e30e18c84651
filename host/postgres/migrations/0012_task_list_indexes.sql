-- Task lists page by seq within a tenant (the dashboard's task list, GET
-- /v1/tasks), filtered by state, type, both or neither. Without these an
-- unfiltered or type-filtered page sorted every task of the tenant (77 ms a
-- page at 100,000 tasks on SQLite, growing with the table), and a page of a
-- rare state-and-type pair walked every task of the type or the state.
CREATE INDEX IF NOT EXISTS tasks_tenant_seq     ON tasks (tenant, seq);
CREATE INDEX IF NOT EXISTS tasks_type_seq       ON tasks (tenant, task_type, seq);
CREATE INDEX IF NOT EXISTS tasks_state_type_seq ON tasks (tenant, state, task_type, seq);
