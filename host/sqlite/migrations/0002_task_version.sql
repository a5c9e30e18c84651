-- Row version of a task, for updates fenced on "nothing changed since I read it".
ALTER TABLE tasks ADD COLUMN version INTEGER NOT NULL DEFAULT 1;
