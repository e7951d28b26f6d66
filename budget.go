package interlock

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/interlock-mcp/interlock/budget"
)

// Budgets bound the blast radius of confirmed calls (package budget has
// the domain: what a budget is, its store, the memory store); this file is
// the gate's part, counting a confirmed call against the budgets its
// decision names.
type (
	Budget      = budget.Budget
	BudgetTake  = budget.Take
	BudgetStore = budget.Store
)

// budgetsOf returns the budgets c counts against under d and their takes,
// index for index. A budget d names twice counts the call once.
func budgetsOf(c *Call, d Decision) ([]Budget, []BudgetTake) {
	budgets := make([]Budget, 0, len(d.Budgets))
	takes := make([]BudgetTake, 0, len(d.Budgets))
	for _, b := range d.Budgets {
		key := b.Key(c.Identity)
		if slices.ContainsFunc(takes, func(t BudgetTake) bool { return t.Key == key }) {
			continue
		}
		budgets = append(budgets, b)
		takes = append(takes, BudgetTake{Key: key, Limit: b.Limit, Window: b.Window})
	}
	return budgets, takes
}

// checkBudgets refuses c before anyone is asked to confirm it when a budget
// of d is spent already: nobody should approve a call that would then be
// refused. It counts nothing; [Gate.takeBudgets] does, as the call runs.
func (g *Gate) checkBudgets(ctx context.Context, c *Call, d Decision, tr *trail) error {
	budgets, takes := budgetsOf(c, d)
	ok, wait, spent, err := g.budgets.Peek(ctx, takes)
	return budgetAnswer(c, budgets, tr, ok, wait, spent, err, "nobody was asked to confirm it")
}

// takeBudgets counts c, which is about to run, against every budget of d,
// or, when one of them has no room, against none.
func (g *Gate) takeBudgets(ctx context.Context, c *Call, d Decision, tr *trail) error {
	budgets, takes := budgetsOf(c, d)
	ok, wait, spent, err := g.budgets.Take(ctx, takes)
	return budgetAnswer(c, budgets, tr, ok, wait, spent, err, "it did not run")
}

// budgetAnswer is the gate's answer to c from the store's answer about
// budgets: nil when c may run.
func budgetAnswer(c *Call, budgets []Budget, tr *trail, ok bool, wait time.Duration, spent int, err error, what string) error {
	if err == nil && !ok && (spent < 0 || spent >= len(budgets)) {
		err = fmt.Errorf("the budget store named budget %d of %d", spent, len(budgets))
	}
	if err != nil {
		return budgetsUnavailable(c, err)
	}
	if ok {
		return nil
	}
	tr.budget = budgets[spent].Name
	return budgetSpent(c, budgets[spent], wait, what)
}

func budgetSpent(c *Call, b Budget, wait time.Duration, what string) error {
	per := "principal"
	if b.PerTenant {
		per = "tenant"
	}
	return &Error{
		Code: CodeRateLimited,
		Message: fmt.Sprintf("Budget %q allows %d confirmed calls per %s in %s and is spent, so %s was refused: %s.",
			b.Name, b.Limit, per, b.Window, c.Tool, what),
		Hint: "Do not retry before retry_after_ms has passed; tell the user that this budget is spent, " +
			"and ask the operator if the work cannot wait.",
		RetryAfterMS: max(1, int64(math.Ceil(float64(wait)/float64(time.Millisecond)))),
	}
}

// budgetsUnavailable answers a call whose budgets could not be read: it
// fails closed, as a spent budget would.
func budgetsUnavailable(c *Call, err error) error {
	return storeDown(c, err, "budget", "run")
}
