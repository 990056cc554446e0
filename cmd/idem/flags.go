package main

// Flag parsing shared by the subcommands: standard library flag sets that
// report to the caller instead of printing, flags accepted after positional
// arguments ("idem journal ls PATH --json"), and the help and usage-error
// paths.

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/idemkit/idem"
)

// newFlagSet returns a FlagSet that returns its errors without printing
// anything: parseFlags reports them.
func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// usageFunc writes a subcommand's usage text to w.
type usageFunc func(w io.Writer)

// parseFlags parses args with fs and returns the positional arguments. When
// parsing ends the command (-h, or a bad flag), it writes the help to stdout
// or the error and a pointer to -h to stderr, and returns ok false and the
// exit code.
func parseFlags(fs *flag.FlagSet, e env, args []string, usage usageFunc) (pos []string, code int, ok bool) {
	pos, err := parseInterspersed(fs, args)
	switch {
	case err == nil:
		return pos, exitOK, true
	case errors.Is(err, flag.ErrHelp):
		usage(e.stdout)
		return nil, exitOK, false
	default:
		fmt.Fprintf(e.stderr, "%s: %v\n", fs.Name(), err)
		pointToHelp(e, fs.Name())
		return nil, exitUsage, false
	}
}

// usageError reports a wrong positional argument or flag value found after
// parsing, in one line and a pointer to the command's help, and returns
// exitUsage.
func usageError(e env, name string, format string, args ...any) int {
	fmt.Fprintf(e.stderr, "%s: %s\n", name, fmt.Sprintf(format, args...))
	pointToHelp(e, name)
	return exitUsage
}

// pointToHelp tells where a command's full help is, after a usage error.
func pointToHelp(e env, name string) {
	fmt.Fprintf(e.stderr, "Run '%s -h' for usage.\n", name)
}

// writeFlags writes fs's flags with their defaults to w.
func writeFlags(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprint(w, "\nFlags:\n")
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
}

// parseInterspersed parses args with fs, accepting flags before, between
// and after positional arguments, which it returns in order. A "--" ends
// the flags: every argument after it is positional.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	pos := []string{}
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if endedByTerminator(fs, args[:len(args)-len(rest)]) {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// endedByTerminator reports whether fs.Parse stopped at a "--" in place of a
// flag, rather than at a positional argument, by walking the arguments it
// consumed the way it did: a "--" that is the value of a flag before it
// does not count.
func endedByTerminator(fs *flag.FlagSet, consumed []string) bool {
	for i := 0; i < len(consumed); i++ {
		arg := consumed[i]
		if arg == "--" {
			return true
		}
		name := strings.TrimLeft(arg, "-")
		if strings.Contains(name, "=") {
			continue
		}
		if f := fs.Lookup(name); f != nil && !isBoolFlag(f) {
			i++ // its value
		}
	}
	return false
}

func isBoolFlag(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// dialectFlag is the --dialect flag: a built-in dialect, by name. Its zero
// value is the zero dialect.
type dialectFlag struct{ idem.Dialect }

func (f *dialectFlag) String() string { return f.Name }

func (f *dialectFlag) Set(name string) error {
	d, ok := idem.DialectNamed(name)
	if !ok {
		return fmt.Errorf("unknown dialect %q; the dialects are %s", name, dialectNames())
	}
	f.Dialect = d
	return nil
}

// dialectNames lists the built-in dialects' names.
func dialectNames() string {
	var names []string
	for _, d := range idem.Dialects() {
		names = append(names, d.Name)
	}
	return strings.Join(names, ", ")
}
