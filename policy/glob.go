package policy

import (
	"fmt"
	"regexp"
	"strings"
)

// compileGlob turns a tool-name glob into a regular expression matched
// against the whole name. '*' matches any run of characters and '?' any one
// character, '/' and '.' included: tool names are not paths, and a glob
// such as "github_*" must also catch "github_admin/delete_repo". "[abc]",
// "[a-z]" and "[!abc]" are character classes; a backslash makes the next
// character literal.
func compileGlob(glob string) (*regexp.Regexp, error) {
	var b strings.Builder
	b.WriteString(`^(?s:`)
	runes := []rune(glob)
	for i := 0; i < len(runes); i++ {
		switch c := runes[i]; c {
		case '*':
			b.WriteString(`.*`)
		case '?':
			b.WriteString(`.`)
		case '\\':
			if i+1 == len(runes) {
				return nil, fmt.Errorf("ends with a lone backslash")
			}
			i++
			b.WriteString(regexp.QuoteMeta(string(runes[i])))
		case '[':
			end := i + 1
			for end < len(runes) && runes[end] != ']' {
				end++
			}
			if end == len(runes) {
				return nil, fmt.Errorf("has a '[' without its ']'")
			}
			class := runes[i+1 : end]
			b.WriteByte('[')
			if len(class) > 0 && (class[0] == '!' || class[0] == '^') {
				b.WriteByte('^')
				class = class[1:]
			}
			if len(class) == 0 {
				return nil, fmt.Errorf("has an empty character class")
			}
			for _, r := range class {
				if r == '\\' || r == '[' || r == ']' || r == '^' {
					b.WriteByte('\\')
				}
				b.WriteRune(r)
			}
			b.WriteByte(']')
			i = end
		default:
			b.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	b.WriteString(`)$`)
	re, err := regexp.Compile(b.String())
	if err != nil {
		return nil, fmt.Errorf("is not a valid glob: %w", err)
	}
	return re, nil
}
