-- Resource sessions are bounded (issue 43): a holder's open sessions are
-- counted at each create (the per-holder cap), and sessions that ended or
-- expired are purged by the sweep some time after their end.
CREATE INDEX resource_sessions_holder ON resource_sessions (tenant, holder, expires_at);
CREATE INDEX resource_sessions_end ON resource_sessions (coalesce(ended_at, expires_at));
