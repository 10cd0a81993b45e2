// Package config gives a command's flags two more sources: a YAML file
// (`anvil serve`'s /etc/anvil/anvil.yaml, or --config FILE) and ANVIL_*
// environment variables, with the precedence flags > environment > file >
// defaults. The flags are the one table of truth: every flag of the set
// it is given is a key of the file, spelt as the flag is, and a variable
// ANVIL_<NAME> (upper case, dashes as underscores); nothing here lists
// them, so a new flag is a key the moment it exists.
//
// It owns reading and checking the file and the environment (unknown keys
// and wrong types refused with the key and its line), recording which
// source each value came from, and printing the effective configuration
// (--print-config) with secrets redacted, and reading it all again while
// the command runs (reload.go). It does not know what any flag
// means: the command validates the values as it validates flags.
package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// DefaultFile is the config file read when neither --config nor
// ANVIL_CONFIG names one; it may be missing.
const DefaultFile = "/etc/anvil/anvil.yaml"

// The flags AddFlags adds. They choose the file and what to do with it, so
// they are no keys of it.
const (
	FlagConfig      = "config"
	FlagPrintConfig = "print-config"
)

// EnvPrefix starts every variable's name.
const EnvPrefix = "ANVIL_"

// EnvConfig names the variable that names the config file when --config
// is not given: the variable --config would have, by the same rule.
var EnvConfig = EnvName(FlagConfig)

// Redacted is what Print writes instead of a secret's value. Load refuses
// it as a secret's value, so that print-config's output fed back as a file
// fails loudly instead of setting a key to the placeholder.
const Redacted = "<redacted>"

// secretAnnotation marks a flag as a secret (MarkSecret): a token, a
// password, or the path of a file holding keys or credentials.
const secretAnnotation = "anvil_config_secret"

// EnvName is the environment variable of the flag name: ANVIL_ and the
// name in upper case, dashes as underscores (--http-port: ANVIL_HTTP_PORT).
func EnvName(flag string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// MarkSecret marks the flags names of fs as secrets: Print redacts their
// values. It panics if fs has no such flag: a misspelt name would leave a
// secret printed.
func MarkSecret(fs *pflag.FlagSet, names ...string) {
	for _, n := range names {
		if err := fs.SetAnnotation(n, secretAnnotation, []string{"true"}); err != nil {
			panic(fmt.Sprintf("config.MarkSecret: %v", err))
		}
	}
}

// IsSecret reports whether f was marked by MarkSecret.
func IsSecret(f *pflag.Flag) bool {
	_, ok := f.Annotations[secretAnnotation]
	return ok
}

// AddFlags adds --config and --print-config to fs.
func AddFlags(fs *pflag.FlagSet) {
	fs.String(FlagConfig, DefaultFile, "YAML file of settings, each key a flag of this command (http-port: 7080); a missing default file is fine, a missing named one is an error (env "+EnvConfig+"; precedence: flags > "+EnvPrefix+"* environment > file > defaults; see docs/configuration.md)")
	fs.Bool(FlagPrintConfig, false, "print the effective configuration as YAML, each value's source as a comment and secrets redacted, and exit without starting anything")
}

// ForCommand returns the Options of cmd, once its flags are parsed: its
// own flags (those of AddFlags and cobra's --help aside) and the
// inherited ones named, whose values matter to it, as the keys; the file
// --config names, else the one ANVIL_CONFIG names, else DefaultFile; and
// the process's environment.
func ForCommand(cmd *cobra.Command, inherited ...string) (Options, error) {
	keys := pflag.NewFlagSet(cmd.Name(), pflag.ContinueOnError)
	cmd.LocalNonPersistentFlags().VisitAll(func(f *pflag.Flag) {
		if f.Name != FlagConfig && f.Name != FlagPrintConfig && f.Name != "help" {
			keys.AddFlag(f) // the same *Flag: setting it here sets the command's
		}
	})
	for _, name := range inherited {
		f := cmd.InheritedFlags().Lookup(name)
		if f == nil {
			return Options{}, fmt.Errorf("config: %s inherits no flag --%s", cmd.Name(), name)
		}
		keys.AddFlag(f)
	}
	o := Options{Name: cmd.CommandPath(), Flags: keys, File: DefaultFile}
	if f := cmd.Flags().Lookup(FlagConfig); f != nil && f.Changed {
		o.File, o.FileRequired = f.Value.String(), true
	} else if env := os.Getenv(EnvConfig); env != "" {
		o.File, o.FileRequired = env, true
	}
	return o, nil
}

// Options says what Load reads.
type Options struct {
	// Name is the command, for Print's header (e.g. "anvil serve").
	Name string
	// Flags are the settings, parsed from the command line already: each
	// flag is a key of the file and a variable. Load sets the values of
	// those not given on the command line.
	Flags *pflag.FlagSet
	// File is the config file's path; empty: none.
	File string
	// FileRequired makes a missing File an error (it was named);
	// otherwise a missing File is an empty one.
	FileRequired bool
	// LookupEnv reads a variable; if nil, os.LookupEnv.
	LookupEnv func(string) (string, bool)
	// Environ lists the environment, for warning of ANVIL_* variables
	// that are no setting; if nil, os.Environ.
	Environ func() []string
	// Reserved are ANVIL_* variables that other commands read (the
	// clients' ANVIL_TOKEN, …): no flag of Flags may have one of them as
	// its variable (Load refuses to start so), and Load does not warn of
	// them.
	Reserved []string
}

// Source is where a setting's value came from.
type Source int

// The sources, lowest precedence first.
const (
	Default Source = iota
	File
	Env
	Flag
)

func (s Source) String() string {
	switch s {
	case File:
		return "file"
	case Env:
		return "env"
	case Flag:
		return "flag"
	}
	return "default"
}

// Setting is one key's effective value and where it came from.
type Setting struct {
	// Flag is the setting's flag; its Value holds the effective value.
	Flag *pflag.Flag
	// Source is the source of the value.
	Source Source
	// Line is the key's line in the file when the file gave it (whether
	// or not a higher source overrode it); 0 otherwise.
	Line int
	// Overridden lists the lower sources that gave a value too, highest
	// first (never Default).
	Overridden []Source
}

// Config is the effective configuration: every setting's value and source.
type Config struct {
	// Name is Options.Name.
	Name string
	// File is the config file's path ("" for none) and FileFound whether
	// it existed.
	File      string
	FileFound bool
	// Settings are the keys, sorted by name.
	Settings []Setting
	// Warnings are what is suspicious but not refused: an ANVIL_*
	// variable that is no setting (a typo?).
	Warnings []string

	// loaded is each setting's value as Load left it, by name: what
	// Changed compares with, since the command may change the variables
	// its flags are bound to after (a default filled in, an "off" flag
	// turned into a zero).
	loaded map[string][]string
}

// Load reads the file and the environment and sets each flag of
// o.Flags not given on the command line from the highest source that has
// it: the environment, then the file. Every value of every source is
// checked, even one a higher source overrides, and every problem is
// reported at once; a flag set from the file or the environment counts as
// changed afterwards (pflag's Changed), as if it had been given.
func Load(o Options) (*Config, error) {
	var data []byte
	found := false
	if o.File != "" {
		b, err := os.ReadFile(o.File)
		switch {
		case err == nil:
			data, found = b, true
		case errors.Is(err, fs.ErrNotExist) && !o.FileRequired:
		case errors.Is(err, fs.ErrNotExist):
			return nil, fmt.Errorf("config file %s does not exist (named by --%s or %s)", o.File, FlagConfig, EnvConfig)
		default:
			return nil, fmt.Errorf("config file: %w", err)
		}
	}
	return load(o, data, found)
}

// load is Load on the file's contents.
func load(o Options, data []byte, found bool) (*Config, error) {
	if o.LookupEnv == nil {
		o.LookupEnv = os.LookupEnv
	}
	if o.Environ == nil {
		o.Environ = os.Environ
	}
	if err := checkKeys(o); err != nil {
		return nil, err
	}
	var keys map[string]entry
	var errs []error
	if found {
		var err error
		if keys, err = parseFile(o.File, data, o.Flags); keys == nil && err != nil {
			return nil, err // syntax: nothing more to check
		} else if err != nil {
			errs = append(errs, err)
		}
	}
	c := &Config{Name: o.Name, File: o.File, FileFound: found}

	// Each source is applied in turn, lowest first, so that each of its
	// values is checked by the flag's own parser; what the command line
	// gave is put back last.
	type given struct {
		f     *pflag.Flag
		value []string
	}
	var fromFlags []given
	o.Flags.VisitAll(func(f *pflag.Flag) {
		s := Setting{Flag: f}
		if f.Changed {
			fromFlags = append(fromFlags, given{f, current(f)})
			s.Source = Flag
		}
		_, envSet := lookup(o, f.Name)
		if envSet {
			if s.Source > Env {
				s.Overridden = append(s.Overridden, Env)
			} else {
				s.Source = Env
			}
		}
		if e, ok := keys[f.Name]; ok {
			s.Line = e.line
			if s.Source > File {
				s.Overridden = append(s.Overridden, File)
			} else {
				s.Source = File
			}
			if e.bad {
				// reported by parseFile
			} else if err := set(f, e.values); err != nil {
				errs = append(errs, fmt.Errorf("%s:%d: %s: want %s: %w", o.File, e.line, f.Name, kinds[f.Value.Type()].want, err))
			}
		}
		if v, ok := lookup(o, f.Name); ok {
			values := []string{v}
			if kinds[f.Value.Type()].list {
				var err error
				if values, err = splitList(v); err != nil {
					errs = append(errs, fmt.Errorf("%s=%q: want %s: %w", EnvName(f.Name), v, kinds[f.Value.Type()].want, err))
					values = nil
				}
			}
			if values != nil {
				if err := set(f, values); err != nil {
					errs = append(errs, fmt.Errorf("%s=%q: want %s: %w", EnvName(f.Name), v, kinds[f.Value.Type()].want, err))
				}
			}
		}
		c.Settings = append(c.Settings, s)
	})
	for _, g := range fromFlags {
		if err := set(g.f, g.value); err != nil {
			errs = append(errs, fmt.Errorf("--%s: %w", g.f.Name, err)) // cannot happen: it parsed before
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	for _, s := range c.Settings {
		if s.Source != Default {
			s.Flag.Changed = true
		}
	}
	c.Warnings = strayVariables(o)
	c.loaded = map[string][]string{}
	for _, s := range c.Settings {
		c.loaded[s.Flag.Name] = current(s.Flag)
	}
	return c, nil
}

// lookup is the flag's variable when it is set and not empty: an empty
// variable counts as unset, as the clients' ANVIL_SERVER does (and as a
// systemd EnvironmentFile's "ANVIL_X=" line reads).
func lookup(o Options, name string) (string, bool) {
	v, ok := o.LookupEnv(EnvName(name))
	return v, ok && v != ""
}

// checkKeys refuses a set of flags the file and the environment cannot
// serve: a flag of a type no key can hold, two flags with one variable,
// a variable another command reads already. These are programming errors,
// caught by the command's tests.
func checkKeys(o Options) error {
	byEnv := map[string]string{}
	var err error
	o.Flags.VisitAll(func(f *pflag.Flag) {
		if _, ok := kinds[f.Value.Type()]; !ok {
			err = errors.Join(err, fmt.Errorf("config: --%s is a %s, which the config file cannot hold", f.Name, f.Value.Type()))
		}
		env := EnvName(f.Name)
		if other, ok := byEnv[env]; ok {
			err = errors.Join(err, fmt.Errorf("config: --%s and --%s would both be %s", other, f.Name, env))
		}
		byEnv[env] = f.Name
		if slices.Contains(o.Reserved, env) || env == EnvConfig {
			err = errors.Join(err, fmt.Errorf("config: --%s would be %s, which is another setting's variable", f.Name, env))
		}
	})
	return err
}

// strayVariables lists warnings of ANVIL_* variables that are neither a
// setting nor reserved: most likely a misspelt setting, which would
// otherwise be silently ignored.
func strayVariables(o Options) []string {
	known := map[string]bool{EnvConfig: true}
	for _, r := range o.Reserved {
		known[r] = true
	}
	o.Flags.VisitAll(func(f *pflag.Flag) { known[EnvName(f.Name)] = true })
	var warn []string
	for _, kv := range o.Environ() {
		name, value, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, EnvPrefix) && !known[name] && value != "" { // empty is unset, as for a setting
			w := fmt.Sprintf("%s is set but is no setting of %s; ignored", name, o.Name)
			if near := nearest(strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(name, EnvPrefix), "_", "-")), o.Flags); near != "" {
				w += fmt.Sprintf(" (did you mean %s?)", EnvName(near))
			}
			warn = append(warn, w)
		}
	}
	slices.Sort(warn)
	return warn
}
