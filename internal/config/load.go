package config

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/lexer"
	"github.com/goccy/go-yaml/parser"
	"github.com/goccy/go-yaml/token"
)

// ErrHelp is returned by [Load] when args ask for help (-h, -help); the
// caller prints [Usage] and exits 0.
var ErrHelp = flag.ErrHelp

// StringList is a list that YAML may also give as one comma-separated
// string.
type StringList []string

// UnmarshalYAML reads a sequence of strings or one comma-separated string.
func (l *StringList) UnmarshalYAML(b []byte) error {
	var list []string
	if err := yaml.Unmarshal(b, &list); err == nil {
		*l = list
		return nil
	}
	var s string
	if err := yaml.Unmarshal(b, &s); err != nil {
		return errors.New("want a list of strings or one comma-separated string")
	}
	*l = splitList(s, ",")
	return nil
}

// UsageError is an error of [Load] for a command line that does not
// parse: an unknown flag, a flag without its value, a stray argument. A
// command exits 2 for it, as for any usage error, and 1 for a value that
// parses and is refused.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// Load builds the configuration from args (the flags after the subcommand,
// e.g. os.Args[2:]) and env (os.Environ() form, KEY=VALUE): defaults, then
// the YAML file named by -config or GATEHOUSE_CONFIG, then GATEHOUSE_*
// variables, then flags. The result is normalized and validated. Every
// error is one line naming the key, e.g.
//
//	config: http.mode: must be one of redirect, acme-only, serve, got "x"
//
// Load reads only the config file and stats the key files it names.
func Load(args []string, env []string) (Config, error) {
	fs, uses := newFlagSet()
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return Config{}, ErrHelp
		}
		if name, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: -"); ok {
			hint := nearest(name, func(k key) string { return "-" + k.flag }, map[string]string{"config": "-config"})
			return Config{}, &UsageError{fmt.Errorf("config: %v%s", err, didYouMean(hint))}
		}
		return Config{}, &UsageError{fmt.Errorf("config: %v", err)}
	}
	if fs.NArg() > 0 {
		hint := "flags come as -name value"
		if _, err := strconv.ParseBool(fs.Arg(0)); err == nil {
			// "-cluster-affinity false": a boolean flag ends at its name.
			hint = "a boolean flag takes its value after =, as -name=false"
		}
		// "-http-mode -http :80": a flag left without its value took the
		// next flag as one, and that flag's value is the stray argument.
		// No value is repeated that may hold a secret, as error lines
		// end up in logs: what follows "=", a control token, a bus URL's
		// credential.
		if sw, ok := SwallowedFlag(fs, args); ok {
			hint = sw.Hint()
		}
		return Config{}, &UsageError{fmt.Errorf("config: unexpected argument %s (%s)", StrayArg(fs, args, "control-token"), hint)}
	}
	vars, err := environ(env)
	if err != nil {
		return Config{}, err
	}
	cfg := Default()
	path, pathFrom := vars["GATEHOUSE_CONFIG"], "GATEHOUSE_CONFIG"
	// -config given wins, empty too (no file), as any flag's empty value
	// wins over its variable.
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "config" {
			path, pathFrom = f.Value.String(), "-config"
		}
	})
	if path != "" {
		if err := loadFile(&cfg, path); err != nil {
			// A file that cannot be read says where its path came from,
			// as a refused value does: a GATEHOUSE_CONFIG left in the
			// environment is not on the command line.
			if pe := (*os.PathError)(nil); errors.As(err, &pe) {
				return Config{}, fmt.Errorf("config: %s: %w", pathFrom, pe)
			}
			return Config{}, err
		}
	}
	// from names where each key's value came from, when not the file.
	from := map[string]string{}
	for _, k := range keys {
		if v, ok := vars[k.env()]; ok {
			if err := k.set(&cfg, v, false); err != nil {
				return Config{}, fmt.Errorf("config: %s (%s): %v", k.name, k.env(), err)
			}
			from[k.name] = k.env()
		}
	}
	if err := uses.apply(&cfg); err != nil {
		return Config{}, err
	}
	for _, fu := range uses.list {
		from[fu.k.name] = "-" + fu.k.flag
	}
	cfg.normalize()
	cfg.from = from
	if err := cfg.Validate(); err != nil {
		var ke *keyError
		if !errors.As(err, &ke) {
			return Config{}, err
		}
		if a := ke.alt; a != nil && cfg.Key(ke.key) == ke.key && cfg.Key(a.key) != a.key {
			ke = a // the key of the two that a variable or a flag set
		}
		ke.key = cfg.Key(ke.key)
		return Config{}, ke
	}
	return cfg, nil
}

// otherVars are GATEHOUSE_* variables that other subcommands read (ctl's
// API URL); serve ignores them rather than calling them misspelt, so one
// shell can hold both.
var otherVars = []string{"GATEHOUSE_API"}

// environ picks the GATEHOUSE_* variables out of env and refuses unknown
// ones, so a misspelt variable is an error rather than silently ignored.
func environ(env []string) (map[string]string, error) {
	known := map[string]bool{"GATEHOUSE_CONFIG": true}
	for _, v := range otherVars {
		known[v] = true
	}
	for _, k := range keys {
		known[k.env()] = true
	}
	vars := map[string]string{}
	for _, kv := range env {
		name, val, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "GATEHOUSE_") {
			continue
		}
		if !known[name] {
			hint := nearest(strings.TrimPrefix(name, "GATEHOUSE_"), key.env, map[string]string{"config": "GATEHOUSE_CONFIG", "api": "GATEHOUSE_API"})
			return nil, fmt.Errorf("config: unknown environment variable %s%s", name, didYouMean(hint))
		}
		vars[name] = val
	}
	return vars, nil
}

// documents counts the YAML documents in b that hold something: a lone
// "---" at the start or end of the file opens no second one. The parser
// gives a directive ("%YAML 1.2") a document of its own, though it only
// heads the next: counted, a file of a directive and its keys was refused
// as two documents, and one of a directive and nothing else was taken for
// settings.
func documents(b []byte) int {
	f, err := parser.ParseBytes(b, 0)
	if err != nil {
		return 1 // yaml.Unmarshal took it; its own error would have come first
	}
	n := 0
	for _, d := range f.Docs {
		if d != nil && d.Body != nil && d.Body.Type() != ast.DirectiveType {
			n++
		}
	}
	return n
}

// maxConfigFile bounds the configuration file: a complete one is about
// 1 KB, and a peer or issuer entry about 150 bytes, so a megabyte holds
// thousands of them. Read without a bound, a file that never ends
// (/dev/zero) took memory until the process died.
const maxConfigFile = 1 << 20

// loadFile applies the YAML file at path over cfg. It walks the document
// against the key table, so an unknown key, a section that is not a
// mapping and a value of the wrong type are each one line naming the key.
func loadFile(cfg *Config, path string) error {
	b, err := readBounded(path, maxConfigFile)
	if err != nil {
		return err
	}
	// YAML allows a byte order mark at the start, which editors such as
	// Notepad write; the parser keeps it as part of the first key, which
	// was then refused as unknown.
	b = bytes.TrimPrefix(b, []byte("\ufeff"))
	// YAML reads a CRLF line end as a line break, as LF; the library's
	// lexer counted a line twice after a comment or a quoted value over
	// lines ending so, and every error past one named a later line.
	b = bytes.ReplaceAll(b, []byte("\r\n"), []byte("\n"))
	if err := checkShape(b); err != nil {
		return fmt.Errorf("config: %s: %v", path, err)
	}
	// A file named but empty is most often a deploy that failed or a
	// write cut short, not a wish for the defaults: taken, it started the
	// gateway on them without a word. {} asks for them in so many words,
	// and so does -config "" (no file), which also overrides a
	// GATEHOUSE_CONFIG: an operator who meant /dev/null as "no file" is
	// told both.
	if documents(b) == 0 {
		return fmt.Errorf(`config: %s: holds no settings (the file is empty, or only comments): write its settings, or {} to start on the defaults (or give -config "" for no file)`, path)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		// goccy's message is "[line:col] detail" and a source excerpt;
		// keep the first line.
		msg, _, _ := strings.Cut(strings.TrimSpace(yaml.FormatError(err, false, false)), "\n")
		return fmt.Errorf("config: %s: %s", path, inWords(msg))
	}
	if countValues(doc, maxFileValues) > maxFileValues {
		return fmt.Errorf("config: %s: holds more than %d values, each alias counted as the values it stands for; a configuration file holds a few hundred", path, maxFileValues)
	}
	// yaml.Unmarshal reads the first document and drops the rest without
	// a word: every key after a "---" would be ignored.
	if n := documents(b); n > 1 {
		return fmt.Errorf("config: %s: holds %d YAML documents (separated by ---); gatehouse reads one: put every key in one document", path, n)
	}
	f := &file{seen: map[string]bool{}, numbers: numberTexts(b)}
	if err := f.applyTree(cfg, "", doc); err != nil {
		return fmt.Errorf("config: %s: %v", path, err)
	}
	return nil
}

// inWords rewrites the parser's messages about a tab, which quote the tab
// itself: invisible in a one-line error, and the usual cause an editor
// that indents with tabs.
func inWords(msg string) string {
	for _, r := range []struct{ from, to string }{
		{"found character '\t' that cannot start any token", "a tab, which YAML does not take for indentation: indent with spaces"},
		{"tab character cannot use as a map key directly", "a tab before a key, which YAML does not take there: use spaces"},
	} {
		if m, ok := strings.CutSuffix(msg, r.from); ok {
			return m + r.to
		}
	}
	return msg
}

// readBounded reads the file at path, refusing one over limit bytes
// without reading past limit+1. It opens any kind of file, as os.ReadFile does: a
// pipe (-config <(envsubst < gatehouse.yaml.in)) is read like a file.
func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("config: %s: larger than %d MiB (%d bytes); a configuration file is a few KB", path, limit>>20, limit)
	}
	return b, nil
}

// maxDepth and maxMappingKeys bound the shape of a file's document
// before it is parsed. The YAML library's parser costs the square of the
// nesting depth and of the keys in one mapping: a file of 1 MiB nested
// 500,000 deep took over 20 GB before its first error, and one of 100,000
// top-level keys two minutes of CPU. A configuration file nests 4 deep
// (clusters, an entry, a field, its value) and its largest mapping holds
// the top-level keys, about 20, or 45 written dotted.
const (
	maxDepth       = 32
	maxMappingKeys = 256
)

// checkShape refuses a document nested deeper than maxDepth or with a
// mapping of more than maxMappingKeys keys, naming the line it goes past
// the bound at. It reads the lexer's tokens, whose cost is linear, and
// follows the collections they open: a flow collection from its bracket
// to the closing one, a block collection by the column of its entries (a
// "-", a "?" or a key), as the parser does. What does not parse is left
// to the parser to name.
func checkShape(b []byte) error {
	type frame struct {
		flow bool
		col  int // a block collection's entries' column
		keys int
		// asked: the last key was a "? key", whose ": value" on a line
		// of its own is not a second key.
		asked bool
	}
	var stack []frame
	push := func(f frame, line int) error {
		if stack = append(stack, f); len(stack) > maxDepth {
			return fmt.Errorf("line %d: nested more than %d levels deep; a configuration file nests 4", line, maxDepth)
		}
		return nil
	}
	inFlow := func() bool { return len(stack) > 0 && stack[len(stack)-1].flow }
	// block places a block entry at col: it closes the collections
	// indented further and opens one unless one is at col already.
	block := func(col, line int) error {
		for len(stack) > 0 && stack[len(stack)-1].col > col {
			stack = stack[:len(stack)-1]
		}
		if len(stack) > 0 && stack[len(stack)-1].col == col {
			return nil
		}
		return push(frame{col: col}, line)
	}
	key := func(line int) error {
		top := &stack[len(stack)-1]
		if top.keys++; top.keys > maxMappingKeys {
			return fmt.Errorf("line %d: a mapping of more than %d keys; a configuration file's largest holds about 20", line, maxMappingKeys)
		}
		return nil
	}
	var prev *token.Token
	for _, tk := range lexer.Tokenize(string(b)) {
		if tk.Type == token.CommentType {
			continue
		}
		line, col := tk.Position.Line, tk.Position.Column
		var err error
		switch {
		case tk.Type == token.SequenceStartType, tk.Type == token.MappingStartType:
			err = push(frame{flow: true}, line)
		case tk.Type == token.SequenceEndType, tk.Type == token.MappingEndType:
			if inFlow() {
				stack = stack[:len(stack)-1]
			}
		case inFlow():
			if tk.Type == token.MappingValueType {
				err = key(line)
			}
		case tk.Type == token.SequenceEntryType:
			err = block(col, line)
		case tk.Type == token.MappingKeyType:
			// "? key" is counted here, as it may have no ": value".
			if err = block(col, line); err == nil {
				err = key(line)
				stack[len(stack)-1].asked = true
			}
		case tk.Type == token.MappingValueType && prev != nil && prev.Position.Line < line:
			// ": value" opening its line, at the column of the "? key"
			// it belongs to.
			if err = block(col, line); err == nil {
				if !stack[len(stack)-1].asked {
					err = key(line)
				}
				stack[len(stack)-1].asked = false
			}
		case tk.Type == token.MappingValueType && prev != nil:
			if err = block(prev.Position.Column, line); err == nil {
				err = key(line)
				stack[len(stack)-1].asked = false
			}
		}
		if err != nil {
			return err
		}
		prev = tk
	}
	return nil
}

// maxFileValues bounds the values a file's document holds once its
// aliases are expanded. yaml.Unmarshal shares an anchor's value among its
// aliases, but a list entry (clusters, auth.issuers) is re-encoded to be
// decoded strictly (decodeStrict), which expands them all: levels of
// aliases of ten aliases each (a "billion laughs") made gigabytes out of
// a few hundred bytes. A file of a thousand peers holds 4,000 values.
const maxFileValues = 1 << 16

// countValues counts the values in v, a decoded YAML document, shared
// ones each time they appear, stopping once past limit.
func countValues(v any, limit int) int {
	n := 0
	var walk func(v any)
	walk = func(v any) {
		if n++; n > limit {
			return
		}
		switch v := v.(type) {
		case map[string]any:
			for _, e := range v {
				if walk(e); n > limit {
					return
				}
			}
		case []any:
			for _, e := range v {
				if walk(e); n > limit {
					return
				}
			}
		}
	}
	walk(v)
	return n
}

// keyByName indexes keys by YAML path.
var keyByName = func() map[string]key {
	m := map[string]key{}
	for _, k := range keys {
		m[k.name] = k
	}
	return m
}()

// isSection reports whether path is a mapping that holds keys.
func isSection(path string) bool {
	for _, k := range keys {
		if strings.HasPrefix(k.name, path+".") {
			return true
		}
	}
	return false
}

// file is what applyTree needs to know of the file beyond its values.
type file struct {
	// seen holds the keys already applied: a key may be spelt nested
	// (http: {addr: …}) or dotted (http.addr: …), and the YAML parser,
	// which refuses a repeated name, sees two names there, so one value
	// would be dropped unseen.
	seen map[string]bool
	// numbers are the unquoted numbers of the file as written, by key
	// (numberTexts).
	numbers map[string]string
}

// numberTexts maps the key path of every unquoted number in the YAML
// document b to its text as written. A string key keeps that text: YAML
// reads 0123 as 83 and 1_000 as 1000, and a cluster id or a token must be
// what the operator wrote.
func numberTexts(b []byte) map[string]string {
	f, err := parser.ParseBytes(b, 0)
	if err != nil {
		return nil // yaml.Unmarshal has reported it
	}
	out := map[string]string{}
	for _, d := range f.Docs {
		collectNumbers(d.Body, "", out)
	}
	return out
}

func collectNumbers(n ast.Node, path string, out map[string]string) {
	switch n := n.(type) {
	case *ast.MappingNode:
		for _, v := range n.Values {
			collectNumbers(v, path, out)
		}
	case *ast.MappingValueNode:
		if n.Key == nil || n.Key.GetToken() == nil {
			return
		}
		k := n.Key.GetToken().Value
		if path != "" {
			k = path + "." + k
		}
		collectNumbers(n.Value, k, out)
	case *ast.AnchorNode: // id: &c 0123 is the number's text too
		collectNumbers(n.Value, path, out)
	case *ast.IntegerNode, *ast.FloatNode, *ast.InfinityNode, *ast.NanNode:
		if t := n.GetToken(); t != nil {
			out[path] = t.Value
		}
	}
}

// applyTree applies m, the mapping at prefix, over cfg.
func (f *file) applyTree(cfg *Config, prefix string, m map[string]any) error {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		path := n
		if prefix != "" {
			path = prefix + "." + n
		}
		v := m[n]
		if k, ok := keyByName[path]; ok {
			if f.seen[path] {
				return fmt.Errorf("%s: given twice", path)
			}
			f.seen[path] = true
			if text, ok := f.numbers[path]; ok {
				if _, isString := k.field(cfg).(*string); isString {
					v = text
				}
			}
			if err := applyValue(cfg, k, v); err != nil {
				var ee *entryError
				if errors.As(err, &ee) {
					return fmt.Errorf("%s[%d]: %v", path, ee.i, ee.err)
				}
				return fmt.Errorf("%s: %v", path, err)
			}
			continue
		}
		if !isSection(path) {
			hint := nearest(path, func(k key) string { return fmt.Sprintf("%q", k.name) }, nil)
			return fmt.Errorf("unknown key %q%s", path, didYouMean(hint))
		}
		sub, ok := v.(map[string]any)
		if !ok && v != nil {
			return fmt.Errorf("%s: must be a mapping of keys", path)
		}
		if err := f.applyTree(cfg, path, sub); err != nil {
			return err
		}
	}
	return nil
}

// applyValue sets k from one decoded YAML value.
func applyValue(cfg *Config, k key, v any) error {
	switch p := k.field(cfg).(type) {
	case *[]Peer:
		return decodeList(v, p)
	case *[]Issuer:
		return decodeList(v, p)
	case *[]string:
		switch v := v.(type) {
		case nil:
			*p = []string{}
		case string:
			return k.set(cfg, v, false)
		case []any:
			out := []string{}
			for i, it := range v {
				s, ok := scalar(it)
				if !ok {
					return listItemError(i, it)
				}
				out = append(out, s)
			}
			*p = out
		default:
			return errors.New("want a list of strings or one comma-separated string")
		}
		return nil
	}
	s, ok := scalar(v)
	if !ok {
		return errors.New("want a single value, got a list or mapping")
	}
	return k.set(cfg, s, false)
}

// listItemError says why item i of a list of strings is none. The YAML
// library reads an unquoted colon in a [...] list that is inside {...}
// as a key and value (bus: {url: [nats://a:4222]} is a list of one
// mapping, {nats://a: 4222}), which looks like a list of strings, so that
// case is named, with the quoted item to write instead.
func listItemError(i int, it any) error {
	if m, ok := it.(map[string]any); ok && len(m) == 1 {
		for k, v := range m {
			if s, ok := scalar(v); ok {
				return fmt.Errorf("want a list of strings; item %d reads as a mapping, as YAML reads a colon in a [...] list inside {...}: quote it, %q", i, k+":"+s)
			}
		}
	}
	return errors.New("want a list of strings")
}

// scalar renders a decoded YAML scalar as the text a flag would carry.
func scalar(v any) (string, bool) {
	switch v := v.(type) {
	case nil:
		return "", true
	case string:
		return v, true
	case bool, int, int64, uint64, float64:
		return fmt.Sprint(v), true
	}
	return "", false
}

// decodeList is decodeStrict for a list of objects, naming the entry an
// error is in ("[1]: unknown field ..."), as validation does: a list of
// peers is read by its index.
func decodeList[T any](v any, dst *[]T) error {
	items, ok := v.([]any)
	if !ok {
		return decodeStrict(v, dst)
	}
	out := make([]T, len(items))
	for i, item := range items {
		if err := decodeStrict(item, &out[i]); err != nil {
			return &entryError{i, err}
		}
	}
	*dst = out
	return nil
}

// entryError is an error in entry i of a list value.
type entryError struct {
	i   int
	err error
}

func (e *entryError) Error() string { return fmt.Sprintf("[%d]: %v", e.i, e.err) }

// decodeStrict re-encodes v and decodes it into dst, refusing unknown
// fields.
func decodeStrict(v any, dst any) error {
	b, err := yaml.Marshal(v)
	if err != nil {
		return err
	}
	if err := yaml.UnmarshalWithOptions(b, dst, yaml.Strict()); err != nil {
		msg, _, _ := strings.Cut(strings.TrimSpace(yaml.FormatError(err, false, false)), "\n")
		// positions refer to the re-encoded value, not the file
		if i := strings.Index(msg, "] "); strings.HasPrefix(msg, "[") && i > 0 {
			msg = msg[i+2:]
		}
		return errors.New(msg)
	}
	return nil
}

// flagUses records flags in the order given, so they are applied after the
// file and the environment and can name their key in errors.
type flagUses struct {
	list []flagUse
}

type flagUse struct {
	k   key
	val string
}

func (u *flagUses) apply(cfg *Config) error {
	seen := map[string]bool{}
	for _, fu := range u.list {
		appendOne := false
		if fu.k.isRepeated() {
			if !seen[fu.k.name] {
				_ = fu.k.set(cfg, "", false) // the first use replaces the list
			}
			appendOne = true
		}
		seen[fu.k.name] = true
		if err := fu.k.set(cfg, fu.val, appendOne); err != nil {
			return fmt.Errorf("config: %s (-%s): %v", fu.k.name, fu.k.flag, err)
		}
	}
	return nil
}

// flagValue is the flag.Value of one key: it only records the raw value.
type flagValue struct {
	k    key
	uses *flagUses
}

func (v flagValue) String() string { return "" }
func (v flagValue) Set(s string) error {
	v.uses.list = append(v.uses.list, flagUse{v.k, s})
	return nil
}
func (v flagValue) IsBoolFlag() bool { return v.k.isBool() }

func newFlagSet() (*flag.FlagSet, *flagUses) {
	fs := flag.NewFlagSet("gatehouse serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	uses := &flagUses{}
	fs.String("config", "", "YAML configuration file (GATEHOUSE_CONFIG)")
	for _, k := range keys {
		fs.Var(flagValue{k, uses}, k.flag, k.usage)
	}
	return fs, uses
}

// Usage writes the flags of serve, with their variables and defaults, to w.
func Usage(w io.Writer) {
	def := Default()
	fmt.Fprintf(w, "  -config FILE\n\tYAML configuration file (GATEHOUSE_CONFIG)\n")
	for _, k := range keys {
		d := defaultString(k, &def)
		if d != "" {
			d = " (default " + d + ")"
		}
		fmt.Fprintf(w, "  -%s\n\t%s; %s, %s%s\n", k.flag, k.usage, k.name, k.env(), d)
	}
}

func defaultString(k key, c *Config) string {
	switch p := k.field(c).(type) {
	case *string:
		if *p == "" {
			return ""
		}
		return fmt.Sprintf("%q", *p)
	case *[]string, *[]Peer, *[]Issuer:
		return ""
	case *bool:
		return fmt.Sprint(*p)
	case *int:
		return fmt.Sprint(*p)
	case *time.Duration:
		return p.String()
	}
	return ""
}

// normalize trims and canonicalizes what has one canonical form, so
// Validate and every consumer see one spelling.
func (c *Config) normalize() {
	c.Zone = strings.TrimSuffix(strings.ToLower(strings.TrimSpace(c.Zone)), ".")
	c.HTTP.Mode = strings.ToLower(strings.TrimSpace(c.HTTP.Mode))
	c.Cluster.Hash = strings.ToLower(strings.TrimSpace(c.Cluster.Hash))
	c.TLS.CustomDomains = strings.ToLower(strings.TrimSpace(c.TLS.CustomDomains))
	c.Log.Level = strings.ToLower(strings.TrimSpace(c.Log.Level))
	normalizePrefixes(c.TrustedProxies)
	normalizePrefixes(c.DNS.Recursion.Allow)
	for i, u := range c.DNS.Recursion.Upstreams {
		c.DNS.Recursion.Upstreams[i] = normalizeUpstream(u)
	}
	if c.Bus.URL == nil {
		c.Bus.URL = StringList{}
	}
	if c.TrustedProxies == nil {
		c.TrustedProxies = []string{}
	}
	if c.DNS.Recursion.Upstreams == nil {
		c.DNS.Recursion.Upstreams = []string{}
	}
	if c.DNS.Recursion.Allow == nil {
		c.DNS.Recursion.Allow = []string{}
	}
	if c.Clusters == nil {
		c.Clusters = []Peer{}
	}
	if c.Auth.Issuers == nil {
		c.Auth.Issuers = []Issuer{}
	}
}

// normalizePrefixes rewrites each valid CIDR prefix in place in its
// canonical form, and a bare IP as the prefix of that one address; what
// does not parse is left for Validate to name.
func normalizePrefixes(list []string) {
	for i, p := range list {
		if a, err := netip.ParseAddr(p); err == nil {
			list[i] = netip.PrefixFrom(a, a.BitLen()).String()
		} else if pfx, err := netip.ParsePrefix(p); err == nil {
			list[i] = pfx.Masked().String()
		}
	}
}

// normalizeUpstream gives a resolver without a port the DNS port, 53:
// "192.0.2.53", "[2001:db8::53]", "2001:db8::53" and "dns.example" all
// gain ":53". Anything else is returned lower-cased, for Validate.
func normalizeUpstream(s string) string {
	s = strings.ToLower(strings.TrimSpace(s))
	if _, _, err := net.SplitHostPort(s); err == nil {
		return s
	}
	host := strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")
	if a, err := netip.ParseAddr(host); err == nil && a.Zone() == "" {
		return net.JoinHostPort(a.String(), "53")
	}
	// Only a name a resolver could have: a refusal of anything else
	// quotes it as typed, not with a ":53" the operator never wrote.
	if host != "" && strings.Trim(host, "abcdefghijklmnopqrstuvwxyz0123456789.-") == "" {
		return net.JoinHostPort(host, "53")
	}
	return s
}
