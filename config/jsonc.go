package config

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/interlock-mcp/interlock/internal/strictjson"
)

// JSONC reads an MCP client's file as the client does: VS Code and Cursor
// allow // and /* */ comments and trailing commas in their JSON, so those
// are blanked out, and what remains must be strict JSON. Every other byte
// stays where it was, so the lines of the result are the file's, and
// messages about it point where the user looks. A problem is a
// [LoadErrors] at its line, under name.
func JSONC(name string, data []byte) ([]byte, error) {
	out, err := stripJSONC(data)
	if err == nil && len(bytes.TrimSpace(out)) == 0 {
		return nil, LoadErrors{{File: name, Line: 1, Msg: "the file holds only comments: an MCP client's file is a JSON object, such as {\"mcpServers\": {…}}"}}
	}
	if err == nil {
		err = strictjson.Check(out)
	}
	var (
		se  *strictjson.Error
		bad *jsoncError
	)
	switch {
	case err == nil:
		return out, nil
	case errors.As(err, &bad):
		return nil, LoadErrors{{File: name, Line: lineAt(data, bad.offset), Msg: bad.msg}}
	case errors.As(err, &se):
		msg := se.Message
		if se.Path != "" {
			msg = se.Path + ": " + msg
		}
		line, col := lineAt(data, se.Offset), columnAt(data, se.Offset)
		return nil, LoadErrors{{File: name, Line: line, Msg: fmt.Sprintf("%s (column %d): an MCP client's file is JSON, with // and /* */ comments and trailing commas allowed", msg, col)}}
	}
	return nil, LoadErrors{{File: name, Msg: err.Error()}}
}

// jsonDocument says whether a configuration file is an MCP client's JSON
// rather than interlock's YAML, and returns it as strict JSON when it is,
// as it is otherwise.
// A file that starts with a // or /* comment is JSON, and so is one named
// .json that starts with "{"; another that starts with "{" is JSON when it
// reads as JSON once comments are blanked, and otherwise YAML written in
// flow style ({rules: [...]}), which the YAML reader takes as it always
// has.
func jsonDocument(name string, data []byte) ([]byte, error) {
	lead := bytes.TrimLeft(bytes.TrimPrefix(data, []byte("\ufeff")), " \t\r\n")
	commented := bytes.HasPrefix(lead, []byte("//")) || bytes.HasPrefix(lead, []byte("/*"))
	named := strings.EqualFold(filepath.Ext(name), ".json")
	if !commented && !bytes.HasPrefix(lead, []byte("{")) {
		return data, nil
	}
	out, err := JSONC(name, data)
	switch {
	case err == nil:
		return out, nil
	case named || commented:
		return nil, err
	}
	return data, nil
}

// jsoncError is a comment that does not end.
type jsoncError struct {
	offset int
	msg    string
}

func (e *jsoncError) Error() string { return e.msg }

// stripJSONC blanks the comments and trailing commas of data outside its
// strings, and a leading byte order mark, keeping newlines and the offset
// of every other byte.
func stripJSONC(data []byte) ([]byte, error) {
	out := bytes.Clone(data)
	if bytes.HasPrefix(out, []byte("\ufeff")) {
		copy(out, "   ")
	}
	blank := func(from, to int) {
		for i := from; i < to; i++ {
			if out[i] != '\n' && out[i] != '\r' {
				out[i] = ' '
			}
		}
	}
	comma := -1 // the last comma, while only space and comments follow it
	for i := 0; i < len(out); i++ {
		switch c := out[i]; {
		case c == '"':
			comma = -1
			for i++; i < len(out) && out[i] != '"' && out[i] != '\n'; i++ {
				if out[i] == '\\' {
					i++
				}
			}
			// An unclosed string is strict JSON's to report.
		case c == '/' && i+1 < len(out) && out[i+1] == '/':
			end := bytes.IndexByte(out[i:], '\n')
			if end < 0 {
				end = len(out) - i
			}
			blank(i, i+end)
			i += end - 1
		case c == '/' && i+1 < len(out) && out[i+1] == '*':
			end := bytes.Index(out[i+2:], []byte("*/"))
			if end < 0 {
				return nil, &jsoncError{i, "a /* comment is not closed: end it with */"}
			}
			blank(i, i+2+end+2)
			i += 2 + end + 1
		case c == ',':
			comma = i
		case c == '}' || c == ']':
			if comma >= 0 {
				out[comma] = ' '
			}
			comma = -1
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
		default:
			comma = -1
		}
	}
	return out, nil
}

// lineAt is the line, from 1, of the byte at offset.
func lineAt(data []byte, offset int) int {
	offset = min(max(offset, 0), len(data))
	return 1 + bytes.Count(data[:offset], []byte("\n"))
}

// columnAt is the column, from 1 and in bytes, of the byte at offset.
func columnAt(data []byte, offset int) int {
	offset = min(max(offset, 0), len(data))
	return offset - bytes.LastIndexByte(data[:offset], '\n')
}
