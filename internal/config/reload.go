package config

import (
	"fmt"
	"slices"

	"github.com/spf13/pflag"
)

// Reading the configuration again while the command runs (`anvil serve`
// on SIGHUP): the command builds a fresh flag set, gives it the values its
// own command line gave (CommandLine), Loads it, and compares the result
// with what runs (Changed). Whether a change can take effect without a
// restart is the command's to say.

// CommandLine is the values a command line gave, by flag name: what a
// fresh flag set needs to read the file and the environment again under
// the same command line.
type CommandLine map[string][]string

// CommandLineOf records the flags of fs given on the command line. Call
// it before Load, which marks the flags it sets as given too.
func CommandLineOf(fs *pflag.FlagSet) CommandLine {
	c := CommandLine{}
	fs.Visit(func(f *pflag.Flag) { c[f.Name] = current(f) })
	return c
}

// Apply gives fs's flags the values recorded, as if on its command line.
// A flag fs lacks is an error: the command line was another command's.
func (c CommandLine) Apply(fs *pflag.FlagSet) error {
	for name, values := range c {
		f := fs.Lookup(name)
		if f == nil {
			return fmt.Errorf("config: no flag --%s to give the command line's value", name)
		}
		if err := set(f, values); err != nil {
			return fmt.Errorf("--%s: %w", name, err)
		}
		f.Changed = true
	}
	return nil
}

// Changed lists the settings of next whose values differ from those c
// was loaded with (whatever the command did with its flags since), in
// name order: next's Settings, holding the new values and their sources.
func (c *Config) Changed(next *Config) []Setting {
	var changed []Setting
	for _, s := range next.Settings {
		if old, ok := c.loaded[s.Flag.Name]; !ok || !slices.Equal(old, current(s.Flag)) {
			changed = append(changed, s)
		}
	}
	return changed
}

// Adopt sets the running setting name of c to s's value: a change the
// command applied live, so that the next Changed does not report it
// again. A name c lacks is an error.
func (c *Config) Adopt(s Setting) error {
	for i := range c.Settings {
		if c.Settings[i].Flag.Name == s.Flag.Name {
			c.Settings[i].Source, c.Settings[i].Line = s.Source, s.Line
			c.loaded[s.Flag.Name] = current(s.Flag)
			return set(c.Settings[i].Flag, current(s.Flag))
		}
	}
	return fmt.Errorf("config: no setting %s", s.Flag.Name)
}

// Strings is the setting's value in the form its flag takes: one string,
// or a list's items.
func (s Setting) Strings() []string { return current(s.Flag) }
