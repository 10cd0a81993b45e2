package kmod

import (
	"errors"
	"fmt"
	"io"
	"strings"
)

// ModprobeCommand runs a modprobe command line (args without the program
// name) and returns its exit status: 0 when every module named loaded or
// was there already, 1 otherwise, 2 for a usage error. It is what anvil
// does when the kernel runs it as /sbin/modprobe (request_module: a
// filesystem at mount time, a crypto algorithm, a PHY driver), which
// passes "-q -- NAME".
//
// It understands "modprobe [-q] [-v] [-b] [-a] [--] NAME...": -q says
// nothing about names that match no module (failures to load are still
// reported), -v prints what was loaded, -b is accepted (there is no
// blacklist), and without -a only one name may be given (module
// parameters are not supported). cfg.Index, if nil, is the running
// kernel's module directory.
func ModprobeCommand(args []string, cfg ProberConfig, stderr io.Writer) int {
	var quiet, verbose, all bool
	var names []string
	for i, a := range args {
		if a == "--" {
			names = append(names, args[i+1:]...)
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			names = append(names, a)
			continue
		}
		switch a {
		case "-q", "--quiet":
			quiet = true
		case "-v", "--verbose":
			verbose = true
		case "-b", "--use-blacklist":
		case "-a", "--all":
			all = true
		default:
			fmt.Fprintf(stderr, "modprobe: option %s is not supported\n", a)
			return 2
		}
	}
	switch {
	case len(names) == 0:
		fmt.Fprintln(stderr, "modprobe: no module named; usage: modprobe [-q] [-v] [-a] [--] NAME...")
		return 2
	case len(names) > 1 && !all:
		fmt.Fprintf(stderr, "modprobe: module parameters are not supported (%s); use -a to load several modules\n",
			strings.Join(names[1:], " "))
		return 2
	}
	if cfg.Index == nil {
		dir, err := RunningDir()
		if err == nil {
			cfg.Index, err = Open(dir)
		}
		if err != nil {
			if !quiet {
				fmt.Fprintln(stderr, "modprobe:", err)
			}
			return 1
		}
	}
	p := NewProber(cfg)
	status := 0
	for _, name := range names {
		loaded, err := p.Probe(name)
		if verbose && len(loaded) > 0 {
			fmt.Fprintf(stderr, "modprobe: %s: loaded %s\n", name, strings.Join(loaded, " "))
		}
		if err != nil {
			status = 1
			if !quiet || !errors.Is(err, ErrNotFound) {
				fmt.Fprintln(stderr, "modprobe:", err)
			}
		}
	}
	return status
}
