package sqlstore

import (
	"context"
	"fmt"
	"time"

	"github.com/interlock-mcp/interlock/task"
)

// TasksSchema creates the table of tasks in dialect d. Each task is a row
// holding its stored form ([task.Encode]) as body, with the columns that
// find it, compare it and forget it; times are Unix nanoseconds, so tasks
// made in one millisecond keep their order. The table keeps its rowid in
// SQLite: a body holds a tool's whole result, too large a row for a
// table without one.
func (d Dialect) TasksSchema() string {
	return fmt.Sprintf(`
CREATE TABLE IF NOT EXISTS tasks (
	id         %[1]s PRIMARY KEY,
	version    %[2]s NOT NULL,
	tenant     %[1]s NOT NULL,
	principal  %[1]s NOT NULL,
	created_at %[2]s NOT NULL,
	expires_at %[2]s NOT NULL,
	body       %[1]s NOT NULL
);
CREATE INDEX IF NOT EXISTS tasks_owner ON tasks (tenant, principal, created_at);
CREATE INDEX IF NOT EXISTS tasks_expires ON tasks (expires_at);
`, d.text, d.integer)
}

// Tasks keeps tasks ([task.Store]) in the table of
// [Dialect.TasksSchema]. An update is one statement that writes the row
// only where it still holds the version the caller read, so of updates
// from one version, in any number of processes, exactly one changes it:
// SQLite's changes hold the whole file, and PostgreSQL reads the row
// again, at its newest version, before it writes. A task whose expires_at
// passed is gone to every statement at once, and its row is deleted as
// new tasks are made.
type Tasks struct{ store }

var _ task.Store = (*Tasks)(nil)

// NewTasks returns the tasks in db, whose table is that of d's
// TasksSchema; where names the store in errors.
func NewTasks(db Database, d Dialect, where string) *Tasks {
	return &Tasks{store{db: db, d: d, where: where}}
}

func (s *Tasks) fail(err error) error { return fmt.Errorf("%s: %w", s.where, err) }

// columns returns t as version in its stored form and the columns that
// go with it: version, tenant, principal, created_at, expires_at and
// body.
func columns(t *task.Task, version int64) ([]any, error) {
	next := *t
	next.Version = version
	body, err := task.Encode(&next)
	if err != nil {
		return nil, err
	}
	return []any{version, t.Tenant, t.Principal, t.CreatedAt.UnixNano(), t.ExpiresAt.UnixNano(), string(body)}, nil
}

// Create implements [task.Store].
func (s *Tasks) Create(ctx context.Context, t *task.Task) error {
	row, err := columns(t, 1)
	if err != nil {
		return s.fail(err)
	}
	err = s.change(ctx, func(w statements, now time.Time) error {
		// Expired tasks are forgotten here, their ids among them.
		if _, err := w.exec(ctx, "DELETE FROM tasks WHERE expires_at <= ?", now.UnixNano()); err != nil {
			return fmt.Errorf("dropping expired tasks: %w", err)
		}
		n, err := w.exec(ctx, `INSERT INTO tasks (version, tenant, principal, created_at, expires_at, body, id)
			VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING`, append(row, t.ID)...)
		if err == nil && n == 0 {
			err = task.ErrExists
		}
		return err
	})
	if err != nil {
		return s.fail(err)
	}
	t.Version = 1
	return nil
}

// Get implements [task.Store].
func (s *Tasks) Get(ctx context.Context, id string) (*task.Task, error) {
	t, err := scanTask(s.read().row(ctx, "SELECT body FROM tasks WHERE id = ? AND expires_at > ?", id, time.Now().UnixNano()))
	if err != nil {
		return nil, s.fail(err)
	}
	return t, nil
}

// scanTask reads the task in row's body; task.ErrUnknown when there is
// no row.
func scanTask(row Row) (*task.Task, error) {
	var body string
	if err := row.Scan(&body); err != nil {
		if noRows(err) {
			return nil, task.ErrUnknown
		}
		return nil, err
	}
	return task.Decode([]byte(body))
}

// Update implements [task.Store].
func (s *Tasks) Update(ctx context.Context, t *task.Task) (bool, error) {
	row, err := columns(t, t.Version+1)
	if err != nil {
		return false, s.fail(err)
	}
	updated := false
	err = s.change(ctx, func(w statements, now time.Time) error {
		n, err := w.exec(ctx, `UPDATE tasks SET version = ?, tenant = ?, principal = ?, created_at = ?, expires_at = ?, body = ?
			WHERE id = ? AND version = ? AND expires_at > ?`, append(row, t.ID, t.Version, now.UnixNano())...)
		if err != nil || n == 1 {
			updated = err == nil
			return err
		}
		// Nothing was written: the task is at another version, or gone.
		var version int64
		err = w.row(ctx, "SELECT version FROM tasks WHERE id = ? AND expires_at > ?", t.ID, now.UnixNano()).Scan(&version)
		if noRows(err) {
			return task.ErrUnknown
		}
		return err
	})
	if err != nil {
		return false, s.fail(err)
	}
	if updated {
		t.Version++
	}
	return updated, nil
}

// List implements [task.Store].
func (s *Tasks) List(ctx context.Context, tenant, principal string) ([]*task.Task, error) {
	var out []*task.Task
	err := s.read().rows(ctx, func(r Row) error {
		t, err := scanTask(r)
		if err == nil {
			out = append(out, t)
		}
		return err
	}, `SELECT body FROM tasks WHERE tenant = ? AND principal = ? AND expires_at > ?
		ORDER BY created_at DESC, id DESC`, tenant, principal, time.Now().UnixNano())
	if err != nil {
		return nil, s.fail(err)
	}
	return out, nil
}
