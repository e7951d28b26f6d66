package demo

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/interlock-mcp/interlock"
)

// plan is a subscription tier. plans is ordered cheapest first, so a higher
// index is an upgrade.
type plan struct {
	name       string
	priceCents int64
}

var plans = []plan{
	{name: "free", priceCents: 0},
	{name: "pro", priceCents: 1900},
	{name: "scale", priceCents: 4900},
}

func planNames() []string {
	names := make([]string, len(plans))
	for i, p := range plans {
		names[i] = p.name
	}
	return names
}

// planRank returns the position of the named plan in plans.
func planRank(name string) (int, bool) {
	for i, p := range plans {
		if p.name == name {
			return i, true
		}
	}
	return 0, false
}

// dollars converts cents to the wire's dollar amount.
func dollars(cents int64) float64 { return float64(cents) / 100 }

// formatCents renders cents as "$1,250.00" (or "-$30.00").
func formatCents(cents int64) string {
	sign := ""
	if cents < 0 {
		sign, cents = "-", -cents
	}
	whole := fmt.Sprint(cents / 100)
	var grouped strings.Builder
	for i, digit := range whole {
		if i > 0 && (len(whole)-i)%3 == 0 {
			grouped.WriteByte(',')
		}
		grouped.WriteRune(digit)
	}
	return fmt.Sprintf("%s$%s.%02d", sign, grouped.String(), cents%100)
}

func now() string { return time.Now().UTC().Format(time.RFC3339) }

func missingArgument(field, hint string) *interlock.Error {
	e := interlock.Errorf(interlock.CodeValidationFailed, hint, "The %q argument is empty.", field)
	e.ValidationIssues = []interlock.ValidationIssue{{Path: field, Message: "must not be empty", Code: "required"}}
	return e
}

// notOneOf refuses value of argument field, which must be one of allowed.
func notOneOf(field, value, what string, allowed []string) *interlock.Error {
	list := strings.Join(allowed, ", ")
	e := interlock.Errorf(interlock.CodeValidationFailed,
		fmt.Sprintf("Set %q to one of: %s.", field, list),
		"%q is not %s.", value, what)
	e.ValidationIssues = []interlock.ValidationIssue{{Path: field, Message: "must be one of " + list, Code: "enum"}}
	return e
}

func requireCustomerID(field, id string) *interlock.Error {
	if id == "" {
		return missingArgument(field, "Pass a customer id such as acct_9931; call list_customers to find one.")
	}
	return nil
}

func customerNotFound(id string) *interlock.Error {
	return interlock.Errorf(interlock.CodeNotFound,
		"Call list_customers to find a valid customer id, then retry.",
		"No customer has id %q.", id)
}

// customer is a customer with its billing totals; list_customers and
// get_customer both return it.
type customer struct {
	ID                 string  `json:"id"`
	Name               string  `json:"name"`
	Email              string  `json:"email"`
	Plan               string  `json:"plan"`
	PlanPrice          float64 `json:"plan_price"`
	PlanPriceFormatted string  `json:"plan_price_formatted"`
	InvoiceCount       int     `json:"invoice_count"`
	OpenInvoiceCount   int     `json:"open_invoice_count"`
	// Balance is what the customer owes: open invoices net of refunds.
	Balance          float64 `json:"balance"`
	BalanceFormatted string  `json:"balance_formatted"`
	// PlanPrices is the monthly price of every plan, so a summary of a plan
	// change can name both prices.
	PlanPrices map[string]string `json:"plan_prices"`
}

// planPrices is the price list every customer result carries.
var planPrices = func() map[string]string {
	m := make(map[string]string, len(plans))
	for _, p := range plans {
		m[p.name] = formatCents(p.priceCents)
	}
	return m
}()

type customerList struct {
	Customers []customer `json:"customers"`
	Count     int        `json:"count"`
}

// customerQuery selects every customer, or one when ?1 is not empty.
const customerQuery = `
SELECT c.id, c.name, c.email, c.plan,
	count(i.id),
	coalesce(sum(i.status = 'open'), 0),
	coalesce(sum(CASE WHEN i.status = 'open' THEN i.amount_cents -
		coalesce((SELECT sum(r.amount_cents) FROM refunds r WHERE r.invoice_id = i.id), 0) END), 0)
FROM customers c LEFT JOIN invoices i ON i.customer_id = c.id
WHERE ?1 = '' OR c.id = ?1
GROUP BY c.id
ORDER BY c.name`

// querier is what reads need of a *sql.DB or a *sql.Tx, so a preview and
// the change it previews run the same checks.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func queryCustomers(ctx context.Context, q querier, id string) ([]customer, error) {
	rows, err := q.QueryContext(ctx, customerQuery, id)
	if err != nil {
		return nil, fmt.Errorf("demo: query customers: %w", err)
	}
	defer rows.Close()
	out := []customer{}
	for rows.Next() {
		var c customer
		var balance int64
		if err := rows.Scan(&c.ID, &c.Name, &c.Email, &c.Plan, &c.InvoiceCount, &c.OpenInvoiceCount, &balance); err != nil {
			return nil, fmt.Errorf("demo: scan customer: %w", err)
		}
		var price int64
		if rank, ok := planRank(c.Plan); ok {
			price = plans[rank].priceCents
		}
		c.PlanPrice, c.PlanPriceFormatted = dollars(price), formatCents(price)
		c.Balance, c.BalanceFormatted = dollars(balance), formatCents(balance)
		c.PlanPrices = planPrices
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("demo: read customers: %w", err)
	}
	return out, nil
}

func (db *DB) listCustomers(ctx context.Context) (customerList, error) {
	cs, err := queryCustomers(ctx, db.sql, "")
	if err != nil {
		return customerList{}, err
	}
	return customerList{Customers: cs, Count: len(cs)}, nil
}

func (db *DB) customer(ctx context.Context, id string) (customer, error) {
	if err := requireCustomerID("id", id); err != nil {
		return customer{}, err
	}
	return lookupCustomer(ctx, db.sql, id)
}

func lookupCustomer(ctx context.Context, q querier, id string) (customer, error) {
	cs, err := queryCustomers(ctx, q, id)
	if err != nil {
		return customer{}, err
	}
	if len(cs) == 0 {
		return customer{}, customerNotFound(id)
	}
	return cs[0], nil
}

type invoice struct {
	ID                  string  `json:"id"`
	CustomerID          string  `json:"customer_id"`
	Amount              float64 `json:"amount"`
	AmountFormatted     string  `json:"amount_formatted"`
	Status              string  `json:"status"`
	Issued              string  `json:"issued"`
	Refunded            float64 `json:"refunded"`
	Refundable          float64 `json:"refundable"`
	RefundableFormatted string  `json:"refundable_formatted"`
}

type invoiceList struct {
	CustomerID string    `json:"customer_id"`
	Invoices   []invoice `json:"invoices"`
	Count      int       `json:"count"`
}

const invoiceQuery = `
SELECT i.id, i.customer_id, i.amount_cents, i.status, i.issued,
	coalesce((SELECT sum(r.amount_cents) FROM refunds r WHERE r.invoice_id = i.id), 0)
FROM invoices i`

func scanInvoice(scan func(...any) error) (invoice, int64, int64, error) {
	var inv invoice
	var amount, refunded int64
	if err := scan(&inv.ID, &inv.CustomerID, &amount, &inv.Status, &inv.Issued, &refunded); err != nil {
		return invoice{}, 0, 0, err
	}
	inv.Amount, inv.AmountFormatted = dollars(amount), formatCents(amount)
	inv.Refunded = dollars(refunded)
	inv.Refundable, inv.RefundableFormatted = dollars(amount-refunded), formatCents(amount-refunded)
	return inv, amount, refunded, nil
}

func (db *DB) listInvoices(ctx context.Context, customerID string) (invoiceList, error) {
	if err := requireCustomerID("customer_id", customerID); err != nil {
		return invoiceList{}, err
	}
	if _, err := lookupCustomer(ctx, db.sql, customerID); err != nil {
		return invoiceList{}, err
	}
	rows, err := db.sql.QueryContext(ctx, invoiceQuery+` WHERE i.customer_id = ? ORDER BY i.issued, i.id`, customerID)
	if err != nil {
		return invoiceList{}, fmt.Errorf("demo: query invoices: %w", err)
	}
	defer rows.Close()
	out := invoiceList{CustomerID: customerID, Invoices: []invoice{}}
	for rows.Next() {
		inv, _, _, err := scanInvoice(rows.Scan)
		if err != nil {
			return invoiceList{}, fmt.Errorf("demo: scan invoice: %w", err)
		}
		out.Invoices = append(out.Invoices, inv)
	}
	if err := rows.Err(); err != nil {
		return invoiceList{}, fmt.Errorf("demo: read invoices: %w", err)
	}
	out.Count = len(out.Invoices)
	return out, nil
}

// reminder is a payment reminder: the one send_reminder emails, or the one
// preview_reminder shows it would email (without an id or a time).
type reminder struct {
	ReminderID       int64   `json:"reminder_id,omitempty"`
	CustomerID       string  `json:"customer_id"`
	Name             string  `json:"name"`
	To               string  `json:"to"`
	Subject          string  `json:"subject"`
	Body             string  `json:"body"`
	OpenInvoiceCount int     `json:"open_invoice_count"`
	Balance          float64 `json:"balance"`
	BalanceFormatted string  `json:"balance_formatted"`
	SentAt           string  `json:"sent_at,omitempty"`
}

// draftReminder composes the reminder a customer would be sent now; a
// customer with nothing open gets none.
func draftReminder(ctx context.Context, q querier, customerID string) (reminder, error) {
	if err := requireCustomerID("customer_id", customerID); err != nil {
		return reminder{}, err
	}
	c, err := lookupCustomer(ctx, q, customerID)
	if err != nil {
		return reminder{}, err
	}
	if c.OpenInvoiceCount == 0 {
		return reminder{}, interlock.Errorf(interlock.CodeValidationFailed,
			"Do not send a reminder; call list_invoices to confirm the customer has nothing open.",
			"%s (%s) has no open invoices, so there is nothing to remind them about.", c.Name, c.ID)
	}
	return reminder{
		CustomerID:       c.ID,
		Name:             c.Name,
		To:               c.Email,
		Subject:          fmt.Sprintf("Payment reminder: %s outstanding", c.BalanceFormatted),
		Body:             fmt.Sprintf("Hello %s, you have %d open invoice(s) totalling %s. Please arrange payment at your earliest convenience.", c.Name, c.OpenInvoiceCount, c.BalanceFormatted),
		OpenInvoiceCount: c.OpenInvoiceCount,
		Balance:          c.Balance,
		BalanceFormatted: c.BalanceFormatted,
	}, nil
}

// previewReminder shows the reminder sendReminder would send, sending
// nothing.
func (db *DB) previewReminder(ctx context.Context, customerID string) (reminder, error) {
	return draftReminder(ctx, db.sql, customerID)
}

// sendReminder "emails" a payment reminder by recording it in the outbox.
func (db *DB) sendReminder(ctx context.Context, customerID string) (reminder, error) {
	var out reminder
	err := db.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		if out, err = draftReminder(ctx, tx, customerID); err != nil {
			return err
		}
		out.SentAt = now()
		res, err := tx.ExecContext(ctx, `INSERT INTO reminders (customer_id, email, subject, body, sent_at) VALUES (?, ?, ?, ?, ?)`,
			out.CustomerID, out.To, out.Subject, out.Body, out.SentAt)
		if err != nil {
			return fmt.Errorf("demo: record reminder: %w", err)
		}
		if out.ReminderID, err = res.LastInsertId(); err != nil {
			return fmt.Errorf("demo: read reminder id: %w", err)
		}
		return nil
	})
	return out, err
}

type deletion struct {
	ID              string `json:"id"`
	Name            string `json:"name"`
	Deleted         bool   `json:"deleted"`
	InvoicesDeleted int    `json:"invoices_deleted"`
	RefundsDeleted  int    `json:"refunds_deleted"`
}

// deleteCustomer deletes the customer; the schema cascades to its invoices
// and their refunds, which are counted first so the result can say so.
func (db *DB) deleteCustomer(ctx context.Context, id string) (deletion, error) {
	if err := requireCustomerID("id", id); err != nil {
		return deletion{}, err
	}
	out := deletion{ID: id}
	err := db.inTx(ctx, func(tx *sql.Tx) error {
		err := tx.QueryRowContext(ctx, `SELECT name,
			(SELECT count(*) FROM invoices WHERE customer_id = ?1),
			(SELECT count(*) FROM refunds r JOIN invoices i ON i.id = r.invoice_id WHERE i.customer_id = ?1)
			FROM customers WHERE id = ?1`, id).Scan(&out.Name, &out.InvoicesDeleted, &out.RefundsDeleted)
		if errors.Is(err, sql.ErrNoRows) {
			return customerNotFound(id)
		}
		if err != nil {
			return fmt.Errorf("demo: read customer to delete: %w", err)
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM customers WHERE id = ?`, id); err != nil {
			return fmt.Errorf("demo: delete customer: %w", err)
		}
		out.Deleted = true
		return nil
	})
	return out, err
}

type planChange struct {
	CustomerID             string  `json:"customer_id"`
	Name                   string  `json:"name"`
	Direction              string  `json:"direction"`
	FromPlan               string  `json:"from_plan"`
	ToPlan                 string  `json:"to_plan"`
	FromPrice              float64 `json:"from_price"`
	FromPriceFormatted     string  `json:"from_price_formatted"`
	ToPrice                float64 `json:"to_price"`
	ToPriceFormatted       string  `json:"to_price_formatted"`
	MonthlyChange          float64 `json:"monthly_change"`
	MonthlyChangeFormatted string  `json:"monthly_change_formatted"`
	// ChangedAt is empty in a quote: nothing changed yet.
	ChangedAt string `json:"changed_at,omitempty"`
}

// Directions of a plan change, as quote_plan_change takes them.
const (
	upgradeDirection   = "upgrade"
	downgradeDirection = "downgrade"
)

var directions = []string{upgradeDirection, downgradeDirection}

// quotePlanChange checks a plan change and says what it would do. upgrade
// says which direction the calling tool allows; the other direction is
// refused with the other tool as the suggestion, so an agent cannot move
// money the wrong way by picking the wrong tool.
func quotePlanChange(ctx context.Context, q querier, customerID, to string, upgrade bool) (planChange, error) {
	if err := requireCustomerID("customer_id", customerID); err != nil {
		return planChange{}, err
	}
	toRank, ok := planRank(to)
	if !ok {
		return planChange{}, notOneOf("to", to, "a plan", planNames())
	}
	c, err := lookupCustomer(ctx, q, customerID)
	if err != nil {
		return planChange{}, err
	}
	fromRank, _ := planRank(c.Plan)
	if err := checkDirection(c, fromRank, toRank, upgrade); err != nil {
		return planChange{}, err
	}
	from, target := plans[fromRank], plans[toRank]
	diff := target.priceCents - from.priceCents
	sign, direction := "+", upgradeDirection
	if diff < 0 {
		sign, direction = "", downgradeDirection
	}
	return planChange{
		CustomerID:             c.ID,
		Name:                   c.Name,
		Direction:              direction,
		FromPlan:               from.name,
		ToPlan:                 target.name,
		FromPrice:              dollars(from.priceCents),
		FromPriceFormatted:     formatCents(from.priceCents),
		ToPrice:                dollars(target.priceCents),
		ToPriceFormatted:       formatCents(target.priceCents),
		MonthlyChange:          dollars(diff),
		MonthlyChangeFormatted: sign + formatCents(diff) + "/mo",
	}, nil
}

// quotePlanChange is quote_plan_change: direction is "upgrade" or
// "downgrade", the tool the change would go through.
func (db *DB) quotePlanChange(ctx context.Context, customerID, to, direction string) (planChange, error) {
	if !slices.Contains(directions, direction) {
		return planChange{}, notOneOf("direction", direction, "a direction", directions)
	}
	return quotePlanChange(ctx, db.sql, customerID, to, direction == upgradeDirection)
}

// changePlan moves a customer to another plan, after the checks of
// quotePlanChange in the same transaction.
func (db *DB) changePlan(ctx context.Context, customerID, to string, upgrade bool) (planChange, error) {
	var out planChange
	err := db.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		if out, err = quotePlanChange(ctx, tx, customerID, to, upgrade); err != nil {
			return err
		}
		out.ChangedAt = now()
		if _, err := tx.ExecContext(ctx, `UPDATE customers SET plan = ? WHERE id = ?`, out.ToPlan, out.CustomerID); err != nil {
			return fmt.Errorf("demo: update plan: %w", err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO plan_changes (customer_id, from_plan, to_plan, changed_at) VALUES (?, ?, ?, ?)`,
			out.CustomerID, out.FromPlan, out.ToPlan, out.ChangedAt); err != nil {
			return fmt.Errorf("demo: record plan change: %w", err)
		}
		return nil
	})
	return out, err
}

func checkDirection(c customer, fromRank, toRank int, upgrade bool) error {
	to := plans[toRank].name
	if fromRank == toRank {
		return interlock.Errorf(interlock.CodeValidationFailed,
			"Do not retry; the customer is already on this plan. Call get_customer to check the current plan.",
			"%s (%s) is already on the %s plan.", c.Name, c.ID, to)
	}
	if upgrade == (toRank > fromRank) {
		return nil
	}
	want, other := "higher", "downgrade_plan"
	if !upgrade {
		want, other = "lower", "upgrade_plan"
	}
	e := interlock.Errorf(interlock.CodeValidationFailed,
		fmt.Sprintf("Call %s to move %s from %s to %s, or pick a %s plan.", other, c.ID, c.Plan, to, want),
		"%s is not a %s plan than %s's current plan %s.", to, want, c.ID, c.Plan)
	e.SuggestedTool = other
	e.ValidationIssues = []interlock.ValidationIssue{{Path: "to", Message: "must be a " + want + " plan than " + c.Plan, Code: "direction"}}
	return e
}

type refund struct {
	RefundID                     int64   `json:"refund_id"`
	InvoiceID                    string  `json:"invoice_id"`
	CustomerID                   string  `json:"customer_id"`
	Amount                       float64 `json:"amount"`
	AmountFormatted              string  `json:"amount_formatted"`
	InvoiceAmount                float64 `json:"invoice_amount"`
	RefundedTotal                float64 `json:"refunded_total"`
	RefundableRemaining          float64 `json:"refundable_remaining"`
	RefundableRemainingFormatted string  `json:"refundable_remaining_formatted"`
	CreatedAt                    string  `json:"created_at"`
}

// refundQuote is a refund that fits its invoice, before it is made.
type refundQuote struct {
	InvoiceID              string  `json:"invoice_id"`
	CustomerID             string  `json:"customer_id"`
	CustomerName           string  `json:"customer_name"`
	Amount                 float64 `json:"amount"`
	AmountFormatted        string  `json:"amount_formatted"`
	InvoiceAmount          float64 `json:"invoice_amount"`
	InvoiceAmountFormatted string  `json:"invoice_amount_formatted"`
	InvoiceStatus          string  `json:"invoice_status"`
	// Refunded is what earlier refunds gave back; Refundable what is left
	// before this refund, RefundableAfter what is left after it.
	Refunded                 float64 `json:"refunded"`
	RefundedFormatted        string  `json:"refunded_formatted"`
	Refundable               float64 `json:"refundable"`
	RefundableFormatted      string  `json:"refundable_formatted"`
	RefundableAfter          float64 `json:"refundable_after"`
	RefundableAfterFormatted string  `json:"refundable_after_formatted"`

	amountCents, refundedCents int64
}

// quoteRefund checks a refund of amount dollars against an invoice and
// says what it would do.
func quoteRefund(ctx context.Context, q querier, invoiceID string, amount float64) (refundQuote, error) {
	if invoiceID == "" {
		return refundQuote{}, missingArgument("invoice_id", "Pass an invoice id such as inv_1001; call list_invoices to find one.")
	}
	cents := math.Round(amount * 100)
	if amount <= 0 || math.IsNaN(amount) {
		e := interlock.Errorf(interlock.CodeValidationFailed,
			"Pass a positive amount in dollars, such as 25.00.",
			"The refund amount must be greater than zero, got %v.", amount)
		e.ValidationIssues = []interlock.ValidationIssue{{Path: "amount", Message: "must be greater than 0", Code: "range"}}
		return refundQuote{}, e
	}
	if math.Abs(amount*100-cents) > 1e-6 {
		e := interlock.Errorf(interlock.CodeValidationFailed,
			"Round the amount to whole cents (at most two decimal places) and retry.",
			"The refund amount %v has fractions of a cent.", amount)
		e.ValidationIssues = []interlock.ValidationIssue{{Path: "amount", Message: "must have at most two decimal places", Code: "format"}}
		return refundQuote{}, e
	}
	inv, invAmount, refunded, err := scanInvoice(q.QueryRowContext(ctx, invoiceQuery+` WHERE i.id = ?`, invoiceID).Scan)
	if errors.Is(err, sql.ErrNoRows) {
		return refundQuote{}, interlock.Errorf(interlock.CodeNotFound,
			"Call list_invoices with the customer's id to find a valid invoice id, then retry.",
			"No invoice has id %q.", invoiceID)
	}
	if err != nil {
		return refundQuote{}, fmt.Errorf("demo: read invoice: %w", err)
	}
	var customerName string
	if err := q.QueryRowContext(ctx, `SELECT name FROM customers WHERE id = ?`, inv.CustomerID).Scan(&customerName); err != nil {
		return refundQuote{}, fmt.Errorf("demo: read the invoice's customer: %w", err)
	}
	refundable := invAmount - refunded
	// Compare as floats before converting, so an absurd amount cannot
	// overflow int64.
	if cents > float64(refundable) {
		hint := fmt.Sprintf("Refund at most %s, the invoice amount minus earlier refunds.", formatCents(refundable))
		if refundable == 0 {
			hint = "Do not retry; this invoice has already been refunded in full."
		}
		e := interlock.Errorf(interlock.CodeValidationFailed, hint,
			"A refund of $%.2f exceeds the %s still refundable on %s (invoice %s, refunded %s).",
			amount, formatCents(refundable), inv.ID, inv.AmountFormatted, formatCents(refunded))
		e.ValidationIssues = []interlock.ValidationIssue{{Path: "amount", Message: "must not exceed " + formatCents(refundable), Code: "range"}}
		return refundQuote{}, e
	}
	amountCents := int64(cents)
	after := refundable - amountCents
	return refundQuote{
		InvoiceID:                inv.ID,
		CustomerID:               inv.CustomerID,
		CustomerName:             customerName,
		Amount:                   dollars(amountCents),
		AmountFormatted:          formatCents(amountCents),
		InvoiceAmount:            inv.Amount,
		InvoiceAmountFormatted:   inv.AmountFormatted,
		InvoiceStatus:            inv.Status,
		Refunded:                 inv.Refunded,
		RefundedFormatted:        formatCents(refunded),
		Refundable:               inv.Refundable,
		RefundableFormatted:      inv.RefundableFormatted,
		RefundableAfter:          dollars(after),
		RefundableAfterFormatted: formatCents(after),
		amountCents:              amountCents,
		refundedCents:            refunded,
	}, nil
}

// quoteRefund is quote_refund: the checks of refund_invoice, refunding
// nothing.
func (db *DB) quoteRefund(ctx context.Context, invoiceID string, amount float64) (refundQuote, error) {
	return quoteRefund(ctx, db.sql, invoiceID, amount)
}

// refundInvoice records a refund of amount dollars against an invoice. The
// checks of quoteRefund and the insert share one write transaction, so two
// concurrent refunds cannot together exceed the invoice.
func (db *DB) refundInvoice(ctx context.Context, invoiceID string, amount float64) (refund, error) {
	var out refund
	err := db.inTx(ctx, func(tx *sql.Tx) error {
		q, err := quoteRefund(ctx, tx, invoiceID, amount)
		if err != nil {
			return err
		}
		createdAt := now()
		res, err := tx.ExecContext(ctx, `INSERT INTO refunds (invoice_id, amount_cents, created_at) VALUES (?, ?, ?)`,
			q.InvoiceID, q.amountCents, createdAt)
		if err != nil {
			return fmt.Errorf("demo: record refund: %w", err)
		}
		id, err := res.LastInsertId()
		if err != nil {
			return fmt.Errorf("demo: read refund id: %w", err)
		}
		out = refund{
			RefundID:                     id,
			InvoiceID:                    q.InvoiceID,
			CustomerID:                   q.CustomerID,
			Amount:                       q.Amount,
			AmountFormatted:              q.AmountFormatted,
			InvoiceAmount:                q.InvoiceAmount,
			RefundedTotal:                dollars(q.refundedCents + q.amountCents),
			RefundableRemaining:          q.RefundableAfter,
			RefundableRemainingFormatted: q.RefundableAfterFormatted,
			CreatedAt:                    createdAt,
		}
		return nil
	})
	return out, err
}
