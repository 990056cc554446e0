package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run runs the idem command line args (without the program name) and returns
// its exit code.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return runEnv(ctx, env{stdin: stdin, stdout: stdout, stderr: stderr, now: time.Now}, args)
}

// env is what a subcommand may use of the world outside it: the standard
// streams and the clock. Tests replace the clock.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	now            func() time.Time
}

// A command is one subcommand of idem. Adding a subcommand is a file that
// defines its command and an entry in commands.
type command struct {
	name    string
	summary string // one line for the command listing
	run     func(ctx context.Context, e env, args []string) int
}

// commands are the subcommands of idem, in the order usage lists them.
var commands = []command{
	chaosCommand,
	demoCommand,
	journalCommand,
	sendCommand,
	serveCommand,
}

// runEnv dispatches args to the subcommand they name.
func runEnv(ctx context.Context, e env, args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(e.stderr, "idem: no command given")
		pointToHelp(e, "idem")
		return exitUsage
	}
	name := args[0]
	switch name {
	case "-h", "-help", "--help", "help":
		writeUsage(e.stdout)
		return exitOK
	case "-version", "--version", "version":
		writeVersion(e.stdout)
		return exitOK
	}
	for _, c := range commands {
		if c.name == name {
			return c.run(ctx, e, args[1:])
		}
	}
	fmt.Fprintf(e.stderr, "idem: unknown command %q\n", name)
	pointToHelp(e, "idem")
	return exitUsage
}

// writeUsage lists the commands and the exit codes.
func writeUsage(w io.Writer) {
	fmt.Fprint(w, "Usage: idem <command> [arguments]\n\nCommands:\n")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, "\nRun \"idem <command> -h\" for a command's arguments and flags, \"idem --version\" for the build.\n\n")
	writeExitCodes(w)
}
