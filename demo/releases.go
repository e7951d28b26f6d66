package demo

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/interlock-mcp/interlock"
)

var environments = []string{"staging", "production"}

type promotion struct {
	Service     string `json:"service"`
	Version     string `json:"version"`
	Environment string `json:"environment"`
	// PreviousVersion is what the environment ran before; empty if nothing.
	PreviousVersion string `json:"previous_version"`
	// Changed is false when the environment already ran this version.
	Changed    bool   `json:"changed"`
	PromotedAt string `json:"promoted_at,omitempty"`
}

// promoteRelease points environment of service at the service's latest
// release.
func (db *DB) promoteRelease(ctx context.Context, service, environment string) (promotion, error) {
	if service == "" {
		return promotion{}, missingArgument("service", "Pass a service name such as billing-api or web.")
	}
	if !slices.Contains(environments, environment) {
		e := interlock.Errorf(interlock.CodeValidationFailed,
			fmt.Sprintf("Set \"environment\" to one of: %s.", strings.Join(environments, ", ")),
			"%q is not an environment.", environment)
		e.ValidationIssues = []interlock.ValidationIssue{{Path: "environment", Message: "must be one of " + strings.Join(environments, ", "), Code: "enum"}}
		return promotion{}, e
	}
	out := promotion{Service: service, Environment: environment}
	err := db.inTx(ctx, func(tx *sql.Tx) error {
		err := tx.QueryRowContext(ctx, `SELECT version FROM releases WHERE service = ? ORDER BY released_at DESC, rowid DESC LIMIT 1`,
			service).Scan(&out.Version)
		if errors.Is(err, sql.ErrNoRows) {
			return serviceNotFound(ctx, tx, service)
		}
		if err != nil {
			return fmt.Errorf("demo: read latest release: %w", err)
		}
		err = tx.QueryRowContext(ctx, `SELECT version FROM deployments WHERE service = ? AND environment = ?`,
			service, environment).Scan(&out.PreviousVersion)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("demo: read deployment: %w", err)
		}
		if out.PreviousVersion == out.Version {
			return nil
		}
		out.Changed, out.PromotedAt = true, now()
		_, err = tx.ExecContext(ctx, `INSERT INTO deployments (service, environment, version, deployed_at) VALUES (?, ?, ?, ?)
			ON CONFLICT (service, environment) DO UPDATE SET version = excluded.version, deployed_at = excluded.deployed_at`,
			service, environment, out.Version, out.PromotedAt)
		if err != nil {
			return fmt.Errorf("demo: record deployment: %w", err)
		}
		return nil
	})
	return out, err
}

// serviceNotFound names the services that do exist, since no tool lists
// them.
func serviceNotFound(ctx context.Context, tx *sql.Tx, service string) error {
	rows, err := tx.QueryContext(ctx, `SELECT name FROM services ORDER BY name`)
	if err != nil {
		return fmt.Errorf("demo: list services: %w", err)
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return fmt.Errorf("demo: scan service: %w", err)
		}
		names = append(names, name)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("demo: read services: %w", err)
	}
	return interlock.Errorf(interlock.CodeNotFound,
		fmt.Sprintf("Set \"service\" to one of: %s, then retry.", strings.Join(names, ", ")),
		"No service named %q has releases.", service)
}
