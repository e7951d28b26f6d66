package policy

import "testing"

func TestCompileGlob(t *testing.T) {
	tests := []struct {
		glob, name string
		want       bool
	}{
		{"delete_*", "delete_customer", true},
		{"github_*", "github_admin/delete_repo", true},
		{"*", "a/b/c", true},
		{"*_repo", "org/team/delete_repo", true},
		{"db.*", "db.users/drop", true},
		{"db.*", "dbxusers", false},
		{"?", "/", true},
		{"a?c", "a/c", true},
		{"delete_*", "undelete_x", false},
		{"delete_customer", "delete_customers", false},
		{"[ab]_x", "b_x", true},
		{"[!ab]_x", "b_x", false},
		{"[!ab]_x", "c_x", true},
		{"[a-c]*", "c/d", true},
		{`\*`, "*", true},
		{`\*`, "x", false},
		{"ü*", "über/x", true},
		{"a(b)+", "a(b)+", true},
		{"a(b)+", "abb", false},
	}
	for _, tt := range tests {
		t.Run(tt.glob+" "+tt.name, func(t *testing.T) {
			re, err := compileGlob(tt.glob)
			if err != nil {
				t.Fatal(err)
			}
			if got := re.MatchString(tt.name); got != tt.want {
				t.Errorf("match = %v, want %v", got, tt.want)
			}
		})
	}
	for _, bad := range []string{"[", "a[b", `a\`, "[]", "[!]"} {
		if _, err := compileGlob(bad); err == nil {
			t.Errorf("compileGlob(%q) succeeded", bad)
		}
	}
}
