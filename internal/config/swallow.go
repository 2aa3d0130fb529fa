package config

import (
	"flag"
	"fmt"
	"slices"
	"strings"
)

// Swallowed is a flag given no value that took the next flag as one, as
// Go's flags do: "-config -http :80" sets -config to "-http", and ":80"
// is left over.
type Swallowed struct {
	// Flag is the flag that took the other, without its dash.
	Flag string
	// Took is what it took, as given, with anything after "=" shown as
	// "…": it may be a secret ("-control-token=…"), and error lines end
	// up in logs.
	Took string
	// TookFlag is the name of the flag it took: its own value, next on
	// the command line, is left over and may be a secret too.
	TookFlag string
}

// Hint says what went wrong, for an error line.
func (s Swallowed) Hint() string {
	return fmt.Sprintf("-%s took %q as its value: give it one, as -%s VALUE", s.Flag, s.Took, s.Flag)
}

// SwallowedFlag finds the last flag in args, as fs parses them, that
// took another of fs's flags as its value (-h and -help too, which the
// flag package knows when fs does not define them). The last: the one
// nearest to where the command line stops making sense, whose taken
// flag's own value is the argument left over. It reads args as the flag
// package does, up to the first argument that is not a flag, "--", or
// one fs would refuse, so it can be asked whether Parse succeeded or
// not. A value that begins with "-" but names no flag ("-1", "-") is a
// value.
func SwallowedFlag(fs *flag.FlagSet, args []string) (last Swallowed, found bool) {
	for i := 0; i < len(args); i++ {
		name, assigned, ok := flagName(args[i])
		if !ok {
			break
		}
		f := fs.Lookup(name)
		if f == nil {
			break // unknown, or -h: Parse stops there
		}
		if assigned || isBoolFlag(f) {
			continue
		}
		if i++; i == len(args) {
			break
		}
		val := args[i]
		took, tookAssigned, ok := flagName(val)
		if !ok || (fs.Lookup(took) == nil && took != "h" && took != "help") {
			continue
		}
		shown := val
		if tookAssigned {
			shown = val[:strings.Index(val, "=")+1] + "…"
		}
		last, found = Swallowed{Flag: name, Took: shown, TookFlag: took}, true
	}
	return last, found
}

// flagName reads arg as the flag package does: "-name", "--name",
// "-name=value". ok is false for what it takes as no flag: "-", "--",
// anything not beginning with "-", and a malformed name.
func flagName(arg string) (name string, assigned, ok bool) {
	if len(arg) < 2 || arg[0] != '-' {
		return "", false, false
	}
	name = arg[1:]
	if name[0] == '-' {
		name = name[1:]
	}
	if name == "" || name[0] == '-' || name[0] == '=' {
		return "", false, false
	}
	name, _, assigned = strings.Cut(name, "=")
	return name, assigned, true
}

func isBoolFlag(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// StrayArg quotes the first argument fs left over from args (after a
// Parse that succeeded), for an error line, with nothing shown that may
// be a secret, as error lines end up in logs: a URL's user and password
// are xxxxx ("-bus URL, URL" split by a space after its comma, "-bus=
// URL"), and an argument that comes right after one of the secret flags,
// or after its value, or after its name taken as another flag's value, is
// not shown at all: it is most likely the value, or the part of it the
// shell split off ("-control-token= TOKEN", "-control-token $T" with a
// space in T).
func StrayArg(fs *flag.FlagSet, args []string, secret ...string) string {
	stray := len(args) - fs.NArg()
	// owner: the flag whose name or value args[stray-1] is, as fs read it.
	owner := ""
	for i := 0; i < stray; i++ {
		name, assigned, ok := flagName(args[i])
		f := fs.Lookup(name)
		if !ok || f == nil {
			break // "--", which ends the flags
		}
		owner = name
		if assigned || isBoolFlag(f) {
			continue
		}
		if i++; i == stray-1 {
			if took, tookAssigned, ok := flagName(args[i]); ok && !tookAssigned && slices.Contains(secret, took) {
				owner = took
			}
		}
	}
	if slices.Contains(secret, owner) {
		return fmt.Sprintf("(the value of -%s, not shown)", owner)
	}
	urls := strings.Split(fs.Arg(0), ",")
	for i, u := range urls {
		urls[i] = RedactURL(u)
	}
	return fmt.Sprintf("%q", strings.Join(urls, ","))
}
