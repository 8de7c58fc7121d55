// Package yamlconf decodes configuration files strictly: an unknown field
// is an error, and every error is one line that names the field by its path
// in the document (nodes[2].addr), not by a Go type or a line alone.
package yamlconf

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Decode decodes the YAML document b into v, refusing fields v does not
// have. An empty document leaves v as it is.
func Decode(b []byte, v any) error {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	err := dec.Decode(v)
	if err == nil || errors.Is(err, io.EOF) {
		return nil
	}
	msg := strings.TrimPrefix(oneLine(err.Error()), "yaml: ")
	var doc yaml.Node
	if yaml.Unmarshal(b, &doc) != nil {
		return errors.New(msg) // a syntax error, with its line
	}
	idx := index(&doc)
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		// A value's own UnmarshalText refused it: name the field that
		// holds the value the message quotes.
		if p, ok := idx.quotedBy(msg); ok {
			return fmt.Errorf("%s: %s", p, msg)
		}
		return errors.New(msg)
	}
	msgs := make([]string, len(te.Errors))
	for i, e := range te.Errors {
		msgs[i] = idx.explain(e)
	}
	return errors.New(strings.Join(msgs, "; "))
}

// Resolve is path taken relative to the directory of the file that named
// it (configDir); absolute and empty paths are kept.
func Resolve(configDir, path string) string {
	if path == "" || filepath.IsAbs(path) {
		return path
	}
	return filepath.Join(configDir, path)
}

var (
	unknownField = regexp.MustCompile(`^line (\d+): field (.+) not found in type \S+$`)
	badValue     = regexp.MustCompile("^line (\\d+): cannot unmarshal (\\S+)(?: `(.*)`)? into (\\S+)$")
)

// keyAt is a mapping key or a scalar value of the document, with its path.
type keyAt struct {
	line  int
	name  string // the key, or the scalar's value
	path  string
	value bool
}

type pathIndex []keyAt

// explain rewrites one of yaml's "line N: ..." messages to name the path.
func (idx pathIndex) explain(msg string) string {
	if m := unknownField.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		if p, ok := idx.find(line, m[2], false); ok {
			return fmt.Sprintf("%s: unknown field", p)
		}
		return fmt.Sprintf("line %d: %s: unknown field", line, m[2])
	}
	if m := badValue.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		want := wants(m[4])
		if p, ok := idx.badValue(line, m[3]); ok {
			return fmt.Sprintf("%s: %s: want %s", p, quoted(m[2], m[3]), want)
		}
		return fmt.Sprintf("line %d: %s: want %s", line, quoted(m[2], m[3]), want)
	}
	return msg
}

// wants says what a Go type takes, in a configuration's words.
func wants(goType string) string {
	switch goType {
	case "time.Duration":
		return "a duration such as 500ms"
	case "bool":
		return "true or false"
	case "float32", "float64":
		return "a number"
	case "string":
		return "a string"
	}
	if max, ok := uintMax[goType]; ok {
		return "an integer 0.." + max
	}
	if strings.HasPrefix(goType, "int") {
		return "an integer"
	}
	if strings.HasPrefix(goType, "[]") {
		return "a list"
	}
	if strings.HasPrefix(goType, "map[") || !strings.Contains(goType, ".") {
		return "a mapping"
	}
	return "a " + goType[strings.LastIndexByte(goType, '.')+1:]
}

var uintMax = map[string]string{"uint8": "255", "uint16": "65535", "uint32": "4294967295",
	"uint": "18446744073709551615", "uint64": "18446744073709551615"}

// quoted is the refused value, or what it is when yaml does not quote it.
func quoted(tag, value string) string {
	switch {
	case value != "":
		return value
	case tag == "!!seq":
		return "a list"
	case tag == "!!map":
		return "a mapping"
	}
	return "a " + strings.TrimPrefix(tag, "!!")
}

// find is the path of the key named name (or of the value, for a bad
// value) on line; for a value cut short by yaml, its first characters.
func (idx pathIndex) find(line int, name string, value bool) (string, bool) {
	name = strings.TrimSuffix(name, "...")
	var fallback string
	for _, k := range idx {
		if k.line != line || k.value != value {
			continue
		}
		if strings.HasPrefix(k.name, name) {
			return k.path, true
		}
		if fallback == "" {
			fallback = k.path
		}
	}
	return fallback, fallback != ""
}

// badValue is the path of the value yaml refused on line: the scalar that
// starts with value (yaml cuts long ones short), else a key that does (a
// map's key of the wrong type), else, for a list or mapping where a
// scalar belongs (no value quoted), the line's last key.
func (idx pathIndex) badValue(line int, value string) (string, bool) {
	if value == "" {
		last := ""
		for _, k := range idx {
			if k.line == line && !k.value {
				last = k.path
			}
		}
		return last, last != ""
	}
	value = strings.TrimSuffix(value, "...")
	for _, scalar := range []bool{true, false} {
		for _, k := range idx {
			if k.line == line && k.value == scalar && strings.HasPrefix(k.name, value) {
				return k.path, true
			}
		}
	}
	return idx.find(line, value, true)
}

// quotedBy is the path of the longest value that msg quotes.
func (idx pathIndex) quotedBy(msg string) (string, bool) {
	best := -1
	for i, k := range idx {
		if k.value && len(k.name) > 1 && strings.Contains(msg, k.name) && (best < 0 || len(k.name) > len(idx[best].name)) {
			best = i
		}
	}
	if best < 0 {
		return "", false
	}
	return idx[best].path, true
}

// index lists every key and scalar value of doc with its path.
func index(doc *yaml.Node) pathIndex {
	var idx pathIndex
	var walk func(n *yaml.Node, path string)
	walk = func(n *yaml.Node, path string) {
		switch n.Kind {
		case yaml.DocumentNode:
			for _, c := range n.Content {
				walk(c, path)
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				p := k.Value
				if path != "" {
					p = path + "." + k.Value
				}
				idx = append(idx, keyAt{line: k.Line, name: k.Value, path: p})
				walk(v, p)
			}
		case yaml.SequenceNode:
			for i, c := range n.Content {
				walk(c, fmt.Sprintf("%s[%d]", path, i))
			}
		case yaml.ScalarNode:
			idx = append(idx, keyAt{line: n.Line, name: n.Value, path: path, value: true})
		}
	}
	walk(doc, "")
	return idx
}

// oneLine joins a multi-line message.
func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", " ")), " ")
}
