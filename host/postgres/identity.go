package postgres

import (
	"context"
	"time"
)

// DatabaseID returns the database's identity, made once by its migrations,
// and whether a gate host has claimed a results folder for it.
func (s *Store) DatabaseID(ctx context.Context) (id string, claimed bool, err error) {
	var at *int64
	if err := s.pool.QueryRow(ctx, `SELECT database_id, results_claimed_at FROM gate_identity WHERE id = 1`).Scan(&id, &at); err != nil {
		return "", false, unavailable("read the database identity", err)
	}
	return id, at != nil, nil
}

// ClaimResultsFolder records that a results folder now carries this
// database's marker. It reports false when a folder was claimed before.
func (s *Store) ClaimResultsFolder(ctx context.Context) (bool, error) {
	tag, err := s.pool.Exec(ctx, `UPDATE gate_identity SET results_claimed_at = $1 WHERE id = 1 AND results_claimed_at IS NULL`, time.Now().UnixMicro())
	if err != nil {
		return false, unavailable("claim the results folder", err)
	}
	return tag.RowsAffected() == 1, nil
}
