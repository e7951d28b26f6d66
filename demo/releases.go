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

// service is what get_service shows: the release promote_release would
// ship and what each environment runs now.
type service struct {
	Service          string `json:"service"`
	LatestVersion    string `json:"latest_version"`
	LatestReleasedAt string `json:"latest_released_at"`
	// Environments maps every environment to the version it runs, "" for
	// one that runs nothing yet.
	Environments map[string]string `json:"environments"`
}

// lookupService reads a service's latest release and deployments.
func lookupService(ctx context.Context, q querier, name string) (service, error) {
	if name == "" {
		return service{}, missingArgument("service", "Pass a service name such as billing-api or web.")
	}
	out := service{Service: name, Environments: make(map[string]string, len(environments))}
	err := q.QueryRowContext(ctx, `SELECT version, released_at FROM releases WHERE service = ? ORDER BY released_at DESC, rowid DESC LIMIT 1`,
		name).Scan(&out.LatestVersion, &out.LatestReleasedAt)
	if errors.Is(err, sql.ErrNoRows) {
		return service{}, serviceNotFound(ctx, q, name)
	}
	if err != nil {
		return service{}, fmt.Errorf("demo: read latest release: %w", err)
	}
	for _, env := range environments {
		out.Environments[env] = ""
	}
	rows, err := q.QueryContext(ctx, `SELECT environment, version FROM deployments WHERE service = ?`, name)
	if err != nil {
		return service{}, fmt.Errorf("demo: query deployments: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var env, version string
		if err := rows.Scan(&env, &version); err != nil {
			return service{}, fmt.Errorf("demo: scan deployment: %w", err)
		}
		out.Environments[env] = version
	}
	if err := rows.Err(); err != nil {
		return service{}, fmt.Errorf("demo: read deployments: %w", err)
	}
	return out, nil
}

// service is get_service.
func (db *DB) service(ctx context.Context, name string) (service, error) {
	return lookupService(ctx, db.sql, name)
}

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
func (db *DB) promoteRelease(ctx context.Context, name, environment string) (promotion, error) {
	if name == "" {
		return promotion{}, missingArgument("service", "Pass a service name such as billing-api or web.")
	}
	if !slices.Contains(environments, environment) {
		return promotion{}, notOneOf("environment", environment, "an environment", environments)
	}
	out := promotion{Service: name, Environment: environment}
	err := db.inTx(ctx, func(tx *sql.Tx) error {
		s, err := lookupService(ctx, tx, name)
		if err != nil {
			return err
		}
		out.Version, out.PreviousVersion = s.LatestVersion, s.Environments[environment]
		if out.PreviousVersion == out.Version {
			return nil
		}
		out.Changed, out.PromotedAt = true, now()
		_, err = tx.ExecContext(ctx, `INSERT INTO deployments (service, environment, version, deployed_at) VALUES (?, ?, ?, ?)
			ON CONFLICT (service, environment) DO UPDATE SET version = excluded.version, deployed_at = excluded.deployed_at`,
			name, environment, out.Version, out.PromotedAt)
		if err != nil {
			return fmt.Errorf("demo: record deployment: %w", err)
		}
		return nil
	})
	return out, err
}

// serviceNotFound names the services that do exist, so an agent can pick
// one without another call.
func serviceNotFound(ctx context.Context, q querier, name string) error {
	rows, err := q.QueryContext(ctx, `SELECT name FROM services ORDER BY name`)
	if err != nil {
		return fmt.Errorf("demo: list services: %w", err)
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return fmt.Errorf("demo: scan service: %w", err)
		}
		names = append(names, n)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("demo: read services: %w", err)
	}
	return interlock.Errorf(interlock.CodeNotFound,
		fmt.Sprintf("Set \"service\" to one of: %s, then retry.", strings.Join(names, ", ")),
		"No service named %q has releases.", name)
}
