package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/spf13/cobra"
)

// Where the client commands find their bearer token, first match wins:
// --token, $ANVIL_TOKEN, the file --token-file or $ANVIL_TOKEN_FILE names,
// else DefaultTokenFile when it is readable (the admin token a local
// `anvil serve` writes into its default data directory, for root on the
// server machine).
const (
	EnvToken         = "ANVIL_TOKEN"
	EnvTokenFile     = "ANVIL_TOKEN_FILE"
	DefaultTokenFile = "/var/lib/anvil/auth/admin.token"
)

// AddTokenFlags adds --token and --token-file to the root's persistent
// flags.
func AddTokenFlags(cmd *cobra.Command) {
	pf := cmd.PersistentFlags()
	pf.String("token", "", "bearer token for the management API (env "+EnvToken+")")
	pf.String("token-file", "", "file holding the bearer token (env "+EnvTokenFile+"; default "+DefaultTokenFile+" when readable)")
}

// bearerToken finds the token; "" when there is none (the server may have
// authentication off).
func bearerToken(cmd *cobra.Command) (string, error) {
	if f := cmd.Flag("token"); f != nil && f.Value.String() != "" {
		return f.Value.String(), nil
	}
	if t := os.Getenv(EnvToken); t != "" {
		return strings.TrimSpace(t), nil
	}
	file, explicit := "", true
	if f := cmd.Flag("token-file"); f != nil && f.Value.String() != "" {
		file = f.Value.String()
	} else if env := os.Getenv(EnvTokenFile); env != "" {
		file = env
	} else {
		file, explicit = DefaultTokenFile, false
	}
	b, err := os.ReadFile(file)
	if err != nil {
		if !explicit && (errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission)) {
			return "", nil
		}
		return "", fmt.Errorf("token file: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}
